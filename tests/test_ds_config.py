import json
from pathlib import Path

import pytest

from workshop_lib.ds_config import EXPERIMENTS, Experiment, Settings, build_ds_config, shipped_configs
from workshop_lib.errors import WorkshopError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_stage_and_batch_arithmetic(stage):
    cfg = build_ds_config(
        f"stage{stage}",
        Settings(precision="bf16", train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=4, world_size=8),
    )
    assert cfg["zero_optimization"]["stage"] == stage
    assert cfg["train_batch_size"] == 4 * 4 * 8  # micro x accumulation x world_size
    assert cfg["bf16"]["enabled"] is True and cfg["fp16"]["enabled"] is False
    assert "offload_optimizer" not in cfg["zero_optimization"]


def test_offload_sections():
    z2 = build_ds_config("stage2_offload")["zero_optimization"]
    assert z2["offload_optimizer"]["device"] == "cpu" and "offload_param" not in z2
    z3 = build_ds_config("stage3_offload")["zero_optimization"]
    assert z3["offload_param"]["device"] == "cpu" and z3["offload_optimizer"]["device"] == "cpu"


@pytest.mark.parametrize(
    "args, expected",
    [
        ((0, "cpu"), "stage 1, 2 or 3"),
        ((2, "none", "cpu"), "needs ZeRO stage 3"),
        ((3, "nvme", "nvme"), "Unknown offload device"),  # NVMe offload (ZeRO-Infinity) is not an experiment
        ((2, "gpu"), "Unknown offload device"),
        ((4,), "0, 1, 2 or 3"),
    ],
)
def test_an_impossible_experiment_cannot_be_made(args, expected):
    """The legal combinations live in one place (`check_combination`): an `Experiment` is checked as it is made."""
    with pytest.raises(WorkshopError, match=expected):
        Experiment("x", *args)


@pytest.mark.parametrize(
    "experiment, settings, expected",
    [
        ("stage1", Settings(precision="fp8"), "Unknown precision"),
        ("baseline", Settings(), "does not use DeepSpeed"),
        ("stage5", Settings(), "Unknown experiment"),
    ],
)
def test_settings_a_config_cannot_have_are_refused(experiment, settings, expected):
    with pytest.raises(WorkshopError, match=expected):
        build_ds_config(experiment, settings)


def test_an_experiments_overlay_is_set_last_and_checked_by_deepspeed():
    """A new DeepSpeed variant is a record: its overlay's keys land in the config, DeepSpeed accepts them."""
    from workshop_lib.ds_config import check_keys, flatten

    variant = Experiment("stage2_no_overlap", 2, overlay={"zero_optimization.overlap_comm": False})
    cfg = build_ds_config(variant, Settings(precision="bf16"))
    assert cfg["zero_optimization"]["overlap_comm"] is False
    assert {k: v for k, v in flatten(cfg).items() if k != "zero_optimization.overlap_comm"} == {
        k: v
        for k, v in flatten(build_ds_config("stage2", Settings(precision="bf16"))).items()
        if k != "zero_optimization.overlap_comm"
    }
    check_keys(cfg, list(flatten(cfg)))


def test_shipped_json_files_are_generated_from_build_ds_config():
    shipped = shipped_configs()
    on_disk = {p.name: p.read_text() for p in (ROOT / "configs").glob("ds_*.json")}
    assert on_disk == shipped, "configs/ is stale. To fix: python scripts/make_configs.py"
    assert json.loads(shipped["ds_zero3_offload.json"])["train_batch_size"] == "auto"


# ---- What each key means (ds_config.KEYS, explain) and --ds-config overrides checked against DeepSpeed --------

BUILT = [
    (stage, opt, par)
    for stage in range(4)
    for opt, par in [("none", "none"), ("cpu", "none"), ("cpu", "cpu")]
    if not (stage == 0 and opt != "none") and not (stage < 3 and par != "none")
]


def _built(stage, opt, par, **kw):
    experiment = Experiment("x", stage, opt, par)
    return build_ds_config(experiment, Settings(check_grad_overflow=False, **kw))


@pytest.mark.parametrize("stage, opt, par", BUILT)
@pytest.mark.parametrize("precision", ["bf16", "fp16", "auto"])
def test_every_key_the_builder_writes_is_explained(stage, opt, par, precision):
    """A key added to build_ds_config cannot go unexplained: each has a meaning and a setter in KEYS."""
    from workshop_lib.ds_config import KEYS, explain, flatten

    cfg = _built(stage, opt, par, precision=precision)
    assert set(flatten(cfg)) <= set(KEYS), set(flatten(cfg)) - set(KEYS)
    table = explain(cfg)
    assert list(table.columns) == ["key", "value", "meaning", "set by", "DeepSpeed default"]
    assert "(not in workshop_lib.ds_config.KEYS)" not in set(table["meaning"])
    assert set(flatten(cfg)) <= set(table["key"])


class _Reads(dict):
    """A config that records every dotted key read from it (get, [], in): what DeepSpeedConfig reads outside its
    pydantic classes is what it knows; a key it never reads it ignores silently."""

    def __init__(self, d: dict, seen: set, prefix: str = ""):
        super().__init__({k: _Reads(v, seen, f"{prefix}{k}.") if isinstance(v, dict) else v for k, v in d.items()})
        self.seen, self.prefix = seen, prefix

    def get(self, k, default=None):
        self.seen.add(self.prefix + k)
        return super().get(k, default)

    def __getitem__(self, k):
        self.seen.add(self.prefix + k)
        return super().__getitem__(k)

    def __contains__(self, k):
        self.seen.add(self.prefix + k)
        return super().__contains__(k)

    def keys(self):  # DeepSpeedConfig asks `KEY in d.keys()`
        return self

    def __copy__(self):  # DeepSpeedConfig copies the dict it is given
        return self


# Sections DeepSpeed validates with a pydantic class that forbids unknown keys (`ds_config.check_keys` refuses them),
# and those it hands on whole as an optimizer's keyword arguments
VALIDATED, PASSED_ON = ("zero_optimization", "bf16", "fp16", "comms_logger"), ("optimizer.params",)


@pytest.mark.parametrize("stage, opt, par", BUILT)
def test_every_key_the_builder_writes_is_one_deepspeed_reads(stage, opt, par):
    """Checked by DeepSpeed 0.19.8's own DeepSpeedConfig: its config classes accept every key KEYS explains, and
    DeepSpeedConfig reads every other key the builder writes (a key it would ignore fails)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    from workshop_lib.ds_config import KEYS, check_keys, flatten

    cfg = _built(stage, opt, par, precision="bf16")
    check_keys(cfg, list(flatten(cfg)))
    check_keys(_built(3, "cpu", "cpu", precision="bf16"), list(KEYS))
    seen = set()
    batch = dict.fromkeys(["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"], 1)
    DeepSpeedConfig(_Reads(cfg | batch | {"gradient_clipping": 1.0}, seen))  # numbers where the Trainer fills "auto"
    assert {k for k in flatten(cfg) if not k.startswith(VALIDATED + PASSED_ON) and k not in seen} == set()


@pytest.mark.parametrize("name", [name for name, e in EXPERIMENTS.items() if e.deepspeed])
def test_every_experiments_config_is_explained_and_read_by_deepspeed(name):
    """An experiment's overlay cannot bring a key without its `KEYS` line, nor one DeepSpeed refuses."""
    from workshop_lib.ds_config import KEYS, check_keys, flatten

    cfg = build_ds_config(name, Settings(precision="bf16"))
    assert set(flatten(cfg)) <= set(KEYS), set(flatten(cfg)) - set(KEYS)
    check_keys(cfg, list(flatten(cfg)))


def test_bucket_sizes_are_explained_in_elements_with_deepspeeds_defaults():
    from workshop_lib.ds_config import KEYS, deepspeed_default, explain

    for key in (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_max_live_parameters",
    ):
        assert "ELEMENTS" in KEYS[f"zero_optimization.{key}"].meaning
    assert deepspeed_default("zero_optimization.reduce_bucket_size") == 500_000_000
    assert deepspeed_default("zero_optimization.offload_optimizer.pin_memory") is True
    # DeepSpeed's default that depends on the stage, as its config class sets it: overlap_comm on at stage 3 only
    assert deepspeed_default("zero_optimization.overlap_comm", 3) is True
    assert deepspeed_default("zero_optimization.overlap_comm", 2) is False
    rows = explain(build_ds_config("stage2")).set_index("key")
    assert rows.at["zero_optimization.allgather_bucket_size", "value"] == "(absent)"  # DeepSpeed's default applies
    assert "hidden_size²" in rows.at["zero_optimization.reduce_bucket_size", "set by"]
    assert "TrainingArguments.learning_rate" in rows.at["optimizer.params.lr", "set by"]


def test_gradient_buckets_in_mib():
    from workshop_lib.ds_config import gradient_bucket_mib

    cfg = build_ds_config("stage2", Settings(precision="bf16", reduce_bucket_size=2**20))
    assert gradient_bucket_mib(cfg) == 2 * 2**20 * 2 / 2**20  # two buffers (overlap_comm) x 2 bytes
    cfg["zero_optimization"]["overlap_comm"] = False
    assert gradient_bucket_mib(cfg) == 2.0
    assert gradient_bucket_mib(build_ds_config("stage2", Settings(precision="fp32", reduce_bucket_size=2**20))) == 8.0
    assert gradient_bucket_mib(build_ds_config("stage2")) is None  # "auto": the Trainer fills it
    assert gradient_bucket_mib(build_ds_config("stage0")) == 0.0


def test_an_override_is_parsed_and_set_without_changing_the_original():
    from workshop_lib.ds_config import apply_overrides, parse_override

    assert parse_override("zero_optimization.reduce_bucket_size=5e7") == (
        "zero_optimization.reduce_bucket_size",
        50_000_000,
    )
    assert parse_override("a.b=false") == ("a.b", False)
    base = build_ds_config("stage3", Settings(precision="bf16"))
    out = apply_overrides(
        base, ["zero_optimization.overlap_comm=false", "zero_optimization.stage3_param_persistence_threshold=1e9"]
    )
    assert out["zero_optimization"]["overlap_comm"] is False
    assert out["zero_optimization"]["stage3_param_persistence_threshold"] == 10**9
    assert base["zero_optimization"]["overlap_comm"] is True


@pytest.mark.parametrize(
    "override, names",
    [
        (  # DeepSpeed's own pydantic class refuses the unknown key; the nearest KEYS key is named
            "zero_optimization.reduce_bucket_sise=50000000",
            ["zero_optimization.reduce_bucket_size", "DeepSpeedZeroConfig", "Extra inputs are not permitted"],
        ),
        ("zero_optimization.offload_optimizer.pin_memry=false", ["offload_optimizer.pin_memory"]),
        ("tensorboard.enabeld=true", ["DeepSpeedMonitorConfig", "tensorboard.enabeld", "Extra inputs"]),
        ("steps_per_prin=10", ["use steps_per_print.", "ignore 'steps_per_prin' silently"]),  # DeepSpeed would not
        ("zero_optimisation.overlap_comm=false", ["use zero_optimization.overlap_comm."]),
        (
            "zero_optimization.overlap_comm=maybe",
            ["valid boolean", "DeepSpeedZeroConfig"],
        ),  # DeepSpeed's own validation
        ("zero_optimization.stage3_prefetch_bucket_size=-1", ["greater than or equal to 0"]),
        (
            "steps_per_print=abc",
            ["steps_per_print takes an integer", "steps_per_print=1000000"],
        ),  # DeepSpeed takes any value
        ("wall_clock_breakdown=1", ["wall_clock_breakdown takes true or false"]),
        ("zero_optimization.stage=2", ["pick another experiment"]),  # the experiment sets it
        ("gradient_clipping=0.5", ["max_grad_norm"]),  # the Trainer sets it, and refuses another value
        ("zero_optimization.reduce_bucket_size=5", ["--reduce-bucket-size"]),  # an option sets it
        ("overlap_comm", ["not KEY=VALUE"]),
    ],
)
def test_a_bad_override_is_refused_with_the_fix(override, names):
    from workshop_lib.ds_config import apply_overrides

    with pytest.raises(WorkshopError) as e:
        apply_overrides(build_ds_config("stage3_offload", Settings(precision="bf16")), [override])
    assert "To fix:" in str(e.value)
    for name in names:
        assert name in str(e.value)


def test_no_top_level_name_deepspeed_reads_is_taken_for_a_typo():
    """The typo check of top-level names (`check_overrides`) refuses a name close to one the workshop writes; no name
    DeepSpeed reads at the top level (its constants with a default, and the sections its DeepSpeedConfig reads) is
    that close, so none is refused by it."""
    import difflib

    import deepspeed.runtime.constants as C

    from workshop_lib.ds_config import KEYS

    written = {k.split(".")[0] for k in KEYS}
    sections = "activation_checkpointing aio amp autotuning bf16 checkpoint comet comms_logger compile csv_monitor"
    sections += " data_efficiency data_types elasticity flops_profiler fp16 hybrid_engine nebula optimizer pipeline"
    sections += " scheduler sparse_attention tensor_parallel tensorboard timers torch_autocast wandb zero_optimization"
    names = set(sections.split()) | {v for k, v in vars(C).items() if isinstance(v, str) and hasattr(C, k + "_DEFAULT")}
    assert {
        n: m for n in names - written if (m := difflib.get_close_matches(n, sorted(written), n=1, cutoff=0.8))
    } == {}


def test_deepspeeds_monitor_sections_are_accepted():
    """Issue 59 item 9: tensorboard, wandb, csv_monitor and comet are DeepSpeed's (DeepSpeedMonitorConfig), each
    with `enabled`; an override of them is accepted and lands in the config."""
    from workshop_lib.ds_config import apply_overrides

    base = build_ds_config("stage2", Settings(precision="bf16"))
    out = apply_overrides(
        base,
        [
            "csv_monitor.enabled=true",
            "csv_monitor.output_path=/tmp/csv",
            "tensorboard.enabled=true",
            "wandb.enabled=false",
            "steps_per_print=10",
        ],
    )
    assert out["csv_monitor"] == {"enabled": True, "output_path": "/tmp/csv"} and out["tensorboard"]["enabled"]
    assert out["wandb"] == {"enabled": False} and out["steps_per_print"] == 10


def test_the_option_is_repeatable_and_refused_before_anything_is_written(tmp_path):
    """`workshop run ... --ds-config` twice adds both; a typo stops in resolve (exit 2, "To fix:") and the output
    directory is never created; a baseline, which has no DeepSpeed, refuses it."""
    from workshop_lib.cli import main
    from workshop_lib.config import RunConfig, parse_run_args, resolve

    cfg = parse_run_args(
        ["stage2", "--ds-config", "zero_optimization.overlap_comm=false", "--ds-config", "wall_clock_breakdown=true"]
    )
    assert cfg.ds_config == ["zero_optimization.overlap_comm=false", "wall_clock_breakdown=true"]
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "stage2",
                "--tiny",
                "--output-dir",
                str(out),
                "--ds-config",
                "zero_optimization.reduce_bucket_sise=50000000",
            ]
        )
        == 2
    )
    assert not out.exists()
    with pytest.raises(WorkshopError, match="does not use DeepSpeed"):
        resolve(RunConfig("baseline", tiny=True, output_dir=str(out), ds_config=["wall_clock_breakdown=true"]))
    assert resolve(
        RunConfig("stage2", tiny=True, output_dir=str(out), ds_config="zero_optimization.overlap_comm=false")
    ).ds_config == ["zero_optimization.overlap_comm=false"]


@pytest.mark.slow
def test_an_override_lands_in_ds_config_json_and_results_json(tmp_path):
    """End to end, the tiny model on stage 2: the key in ds_config.json, the override in results.json's config."""
    from workshop_lib.train import run_experiment

    out = tmp_path / "run"
    res = run_experiment(
        "stage2",
        tiny=True,
        output_dir=str(out),
        save_model=False,
        save_strategy="no",
        max_steps=2,
        ds_config=["zero_optimization.overlap_comm=false"],
    )
    written = json.loads((out / "ds_config.json").read_text())
    assert written["zero_optimization"]["overlap_comm"] is False
    assert written["zero_optimization"]["stage"] == 2
    assert res["config"]["ds_config"] == ["zero_optimization.overlap_comm=false"]
    assert json.loads((out / "results.json").read_text())["config"]["ds_config"] == res["config"]["ds_config"]


def test_comms_logger_block_only_when_asked_and_deepspeed_reads_it():
    from deepspeed.comm.config import DeepSpeedCommsConfig

    from workshop_lib.ds_config import COMMS_LOGGER

    assert "comms_logger" not in build_ds_config("stage2")
    on = build_ds_config("stage2", Settings(comms_logger=True))
    assert on["comms_logger"] == {"enabled": True, "verbose": False, "prof_all": True, "debug": False} == COMMS_LOGGER
    parsed = DeepSpeedCommsConfig(on)  # DeepSpeed's own parser of the block (deepspeed/comm/config.py)
    assert parsed.comms_logger_enabled and parsed.comms_logger.prof_all and not parsed.comms_logger.verbose
    assert {k: v for k, v in on.items() if k != "comms_logger"} == build_ds_config("stage2")  # nothing else changes
