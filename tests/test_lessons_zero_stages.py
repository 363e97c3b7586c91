"""Notebook 02's figures and verdicts (`workshop_lessons.zero_stages`) against the results they were
computed from: the H100 reference runs (workshop_lessons/reference/h100/course) and real tiny runs on this machine."""

import json
from pathlib import Path

import pytest

from conftest import workshop
from workshop_lessons import REFERENCE, REFERENCE_DIR, zero_stages
from workshop_lessons.baseline import gpu_share, gpu_total_mib, peak, speed
from workshop_lessons.zero_stages import compiled
from workshop_lib.fit import GPUS

NAMES = ["baseline", "stage1", "stage2", "stage3", "baseline_ac"]


def _check(r):
    f = zero_stages.figures(r)
    runs = ["baseline", *zero_stages.STAGES]
    assert f.slowest == min(runs, key=lambda s: speed(r[s])[0])
    for s in zero_stages.STAGES:
        st = f.stages[s]
        assert st.peak.difference == pytest.approx(peak(r[s])[0] - peak(r["baseline"])[0])
        assert st.speed.ratio == pytest.approx(speed(r[s])[0] / speed(r["baseline"])[0])
        if st.nvml:  # NVML's peak is the sum of its parts
            assert st.nvml.allocated_mib + st.nvml.cached_mib + st.nvml.outside_mib == pytest.approx(
                r[s]["gpu_peak_mib"]
            )
    losses = [r[s]["train_loss"] for s in zero_stages.STAGES]
    assert f.loss_spread == pytest.approx(max(losses) - min(losses))
    assert f.losses_agree == (max(losses) - min(losses) <= zero_stages.LOSS_AGREE * min(losses))
    assert f.stage3_uncompiled == (
        r["baseline"]["config"].get("torch_compile") and not r["stage3"]["config"].get("torch_compile")
    )
    assert f.ac_peak.difference == pytest.approx(peak(r["baseline_ac"])[0] - peak(r["baseline"])[0])
    # stage 3 is compared with the baseline run of its own compile setting, where there is one
    if f.stage3_like:
        assert compiled(r[f.stage3_like]) == compiled(r["stage3"])
        assert f.stage3_like_speed.ratio == pytest.approx(speed(r["stage3"])[0] / speed(r[f.stage3_like])[0])
        assert f.stage3_like_peak.difference == pytest.approx(peak(r["stage3"])[0] - peak(r[f.stage3_like])[0])
    else:
        assert compiled(r["baseline"]) != compiled(r["stage3"]) and "baseline_no_compile" not in r
    if "baseline_no_compile" in r:
        assert f.compile_speed.ratio == pytest.approx(speed(r["baseline"])[0] / speed(r["baseline_no_compile"])[0])
    else:
        assert f.compile_speed is None and f.compile_peak is None
    return f


def test_figures_and_verdicts_agree_with_the_reference_runs():
    r = {n: json.loads((REFERENCE_DIR / "runs" / n / "results.json").read_text()) for n in NAMES}
    f = _check(r)
    assert f.on_gpu and f.slowest == "stage3" and f.slowest_apart  # on the H200, stage 3 is clearly slowest
    # stage 3 without compilation, the baseline with it, and no uncompiled baseline on file: no like-for-like row
    assert f.stage3_uncompiled and f.stage3_like is None
    # how close stage 3 came to the GPU's limit: its NVML peak over the H200's memory (fit.GPUS, by device name)
    assert f.stage3_gpu_total_mib == GPUS["H200 141GB"] and r["stage3"]["device"] == "NVIDIA H200"
    assert f.stage3_gpu_share == pytest.approx(r["stage3"]["gpu_peak_mib"] / GPUS["H200 141GB"])
    # stage 2 against the baseline: inside the measured band, so no finding
    assert f.stages["stage2"].speed.verdict == "within the band" and f.stages["stage3"].speed.verdict == "lower"
    # activation checkpointing: memory and speed clearly lower (the recomputation costs time); HFU counts the
    # recomputed forward
    assert f.ac_peak.verdict == "lower" and f.ac_speed.verdict == "lower"
    assert 1.2 < f.ac_hfu_over_mfu < 1.4  # one more forward pass of the blocks: about a third more FLOPs
    # the fallback: the same real runs with stage 3's and stage 1's results swapped, so stage 1 is slowest
    swapped = r | {"stage1": r["stage3"] | {"experiment": "stage1"}, "stage3": r["stage1"] | {"experiment": "stage3"}}
    assert _check(swapped).slowest == "stage1"
    # the losses' fallback: stage 3's loss swapped for the classic recipe's (a real run, loss on all tokens)
    classic = json.loads((REFERENCE_DIR / "runs" / "baseline_classic" / "results.json").read_text())
    assert not _check(r | {"stage3": r["stage3"] | {"train_loss": classic["train_loss"]}}).losses_agree


def test_figures_agree_with_tiny_runs_on_this_machine(tiny_runs, tmp_path):
    workshop(
        "run",
        "baseline",
        "--tiny",
        "--activation-checkpointing",
        "true",
        "--save-strategy",
        "no",
        "--output-dir",
        tmp_path / "baseline_ac",
    )
    dirs = {n: tiny_runs / n for n in NAMES[:4]} | {"baseline_ac": tmp_path / "baseline_ac"}
    f = _check({n: json.loads((d / "results.json").read_text()) for n, d in dirs.items()})
    for n in zero_stages.STAGES:  # the config rebuilt from results.json is the one the run handed DeepSpeed
        built, ran = (
            zero_stages.ds_config_of(json.loads((dirs[n] / "results.json").read_text())),
            json.loads((dirs[n] / "ds_config.json").read_text()),
        )
        assert [built[k] for k in ("zero_optimization", "bf16", "fp16")] == [
            ran[k] for k in ("zero_optimization", "bf16", "fp16")
        ]
    if not f.on_gpu:
        assert f.ac_mfu is None and f.ac_hfu_over_mfu is None and f.baseline_nvml is None
        # nothing compiles on a CPU: stage 3 and the baseline differ in ZeRO only; no GPU, no share of one
        assert f.stage3_like == "baseline" and not f.stage3_uncompiled and f.stage3_gpu_share is None


def test_the_gpu_of_a_run():
    """A run's GPU memory: results.json's own figure, else fit.GPUS by the device's name (older runs)."""
    assert gpu_total_mib({"device": "NVIDIA H200"}) == GPUS["H200 141GB"]
    assert gpu_total_mib({"device": "NVIDIA H100 80GB HBM3"}) == GPUS["H100 80GB"]
    assert gpu_total_mib({"device": "NVIDIA A100-SXM4-40GB"}) == GPUS["A100 40GB"]
    assert gpu_total_mib({"device": "NVIDIA GeForce RTX 4090"}) == GPUS["RTX 4090 24GB"]
    assert gpu_total_mib({"device": "cpu (x86_64, 2 cores)"}) is None
    assert gpu_total_mib({"device": "NVIDIA H100 80GB HBM3", "gpu_total_mib": 81000.0}) == 81000.0
    # a run limited by WORKSHOP_GPU_MEMORY_FRACTION: its peak against the share it could use
    r = {"device": "NVIDIA H100 80GB HBM3", "gpu_peak_mib": 30000.0, "gpu_memory_fraction": 0.5}
    assert gpu_share(r) == pytest.approx(30000 / (0.5 * GPUS["H100 80GB"]))
    assert gpu_share({"device": "cpu", "gpu_peak_mib": None}) is None


def test_a_prediction_stands_beside_the_model_states_each_run_kept(tmp_path):
    """`lessons.states_per_param` reads bytes per parameter from the learner's runs where they measured GPU memory,
    else from the GPU reference; `lessons.beside_prediction` sets the learner's numbers beside them."""
    import workshop_lessons as lessons
    from workshop_lib.units import MiB

    ref = lessons.reference("02_zero_stages")
    for n in ("stage2", "stage3"):  # a CPU run: no GPU memory measured
        (tmp_path / n).mkdir()
        (tmp_path / n / "results.json").write_text(json.dumps({"gpu_states_allocated_mib": None, "num_params": 10}))
    measured, source = lessons.states_per_param("02_zero_stages", tmp_path, ["stage2", "stage3"])
    assert source == "the GPU reference"
    assert measured["stage3"] == pytest.approx(
        ref.at["stage3", "gpu_states_allocated_mib"] * MiB / ref.at["stage3", "num_params"]
    )
    (tmp_path / "stage2" / "results.json").write_text(json.dumps({"gpu_states_allocated_mib": 1.0, "num_params": MiB}))
    (tmp_path / "stage3" / "results.json").write_text(json.dumps({"gpu_states_allocated_mib": 2.0, "num_params": MiB}))
    assert lessons.states_per_param("02_zero_stages", tmp_path, ["stage2", "stage3"]) == (
        {"stage2": 1.0, "stage3": 2.0},
        "your runs",
    )
    table = lessons.beside_prediction({"stage2": 4.0, "stage3": None}, {"stage2": 1.0, "stage3": 2.0}, "bytes")
    assert table.to_dict("records") == [
        {"run": "stage2", "your prediction (bytes)": 4.0, "measured (bytes)": 1.0, "measured / predicted": "0.25x"},
        {
            "run": "stage3",
            "your prediction (bytes)": "not written",
            "measured (bytes)": 2.0,
            "measured / predicted": "n/a",
        },
    ]


def test_the_learners_blank_answers_reach_only_lessons_that_say_so(tmp_path, capsys):
    """What a learner notebook does with the answers a learner has not written yet (course/: every prediction None,
    MY_OVERRIDE None), the paths by which they differ from their solution (`make_course.BLANK_AWARE`; scripts/test.sh
    therefore executes the solutions only): a table of "not written" predictions, and no run for a missing key."""
    import workshop_lessons as lessons

    table = lessons.beside_prediction({"stage2": None, "stage3": None}, {"stage2": 1.0, "stage3": 2.0}, "efficiency")
    assert set(table["your prediction (efficiency)"]) == {"not written"} and set(table["measured / predicted"]) == {
        "n/a"
    }
    assert lessons.run_own_key("02_zero_stages", "stage3", None, tmp_path, tiny=True) is None
    assert "Write your KEY=VALUE in MY_OVERRIDE" in capsys.readouterr().out and list(tmp_path.iterdir()) == []


# every complete set of the course's GPU runs on file: today's reference, and the H100's and its repeat
COURSE_SETS = [REFERENCE_DIR / "runs", REFERENCE / "h100/course/runs", REFERENCE / "h100/course/repeat"]


@pytest.mark.parametrize("where", COURSE_SETS, ids=lambda d: f"{d.parent.parent.name}-{d.name}")
def test_the_bytes_per_parameter_each_stage_keeps_add_up_from_deepspeeds_buffers(where):
    """Notebook 02's table of model states per parameter (H100 reference, Qwen3-0.6B, bf16): stages 1-2 keep 14
    bytes/param (16-bit weights, fp32 master weights, Adam's moments) and stage 3 2 more of gradient partitions
    plus its reduce bucket (`zero_stages.account_states`, from DeepSpeed 0.19.8's source); with the 64 MiB the
    process held before each run, at most a couple of MiB per run is left unaccounted."""
    import workshop_lessons as lessons
    from workshop_lib.ds_config import gradient_bucket_mib
    from workshop_lib.units import MiB

    r = {
        n: json.loads((where / n / "results.json").read_text())
        for n in ["baseline", "stage1", "stage2", "stage3", "stage2_no_overlap", "baseline_ac"]
    }
    a = {n: zero_stages.account_states(x) for n, x in r.items()}
    n3 = r["stage3"]["num_params"]
    assert n3 == 596_049_920 and r["stage3"]["config"]["precision"] == "bf16"
    z3 = zero_stages.ds_config_of(r["stage3"])
    assert z3["zero_optimization"]["reduce_bucket_size"] == r["stage3"]["config"]["reduce_bucket_size"] == 500_000_000
    bucket = gradient_bucket_mib(z3)  # one bucket of bf16 elements at stage 3
    assert bucket == pytest.approx(500_000_000 * 2 / MiB)
    assert a["stage1"].parts == a["stage2"].parts == {"16-bit weights": 2, "fp32 master weights": 4, "Adam moments": 8}
    assert a["stage3"].parts == a["stage1"].parts | {"gradient partitions": 2, "reduce bucket": bucket * MiB / n3}
    assert a["baseline"].predicted == 12 and a["stage1"].predicted == 14
    assert a["stage3"].predicted == pytest.approx(17.678, abs=1e-3)
    # stage 3 against stage 2, the same process's leftovers on both sides: the two extra buffers, within the noise
    extra_mib = r["stage3"]["gpu_states_allocated_mib"] - r["stage2"]["gpu_states_allocated_mib"]
    noise = lessons.band("gpu_states_allocated_mib") * r["stage3"]["gpu_states_allocated_mib"]
    assert abs(extra_mib - (2 * n3 / MiB + bucket)) <= max(noise, 0.1)  # 0.1: results.json's rounding of MiB
    for n, x in a.items():  # with what the process held before the run, all but 1% of the states accounted for
        assert 0 <= x.rest < 0.01 * x.measured, (n, x.rest_mib)
    with pytest.raises(ValueError, match="offload"):
        zero_stages.account_states(json.loads((where / "stage3_offload" / "results.json").read_text()))
    text = zero_stages.explain_states(r)  # notebook 02's two sentences, from these accounts
    assert f"{bucket:,.1f} MiB): {a['stage3'].predicted:.2f}" in text and f"({a['stage1'].predicted:.2f})" in text
    worst = max(a, key=lambda k: a[k].rest)
    assert f"at most {a[worst].rest_mib:,.1f} MiB ({a[worst].rest:.3f} bytes/param, {worst})" in text


@pytest.mark.skipif(
    __import__("deepspeed").__version__ != "0.19.8", reason="notebook 02 cites DeepSpeed 0.19.8's lines"
)
def test_overlap_comm_decides_the_stream_and_the_second_bucket_not_when_a_bucket_is_reduced():
    """Notebook 02, stage2_no_overlap: "a full gradient bucket is still reduced during the backward pass, but on the
    compute stream ...; with overlap it goes to a side stream while a second bucket fills" (issue 39, statement 2).
    Each line `zero_stages.OVERLAP_COMM` cites is that line of the installed DeepSpeed's zero/stage_1_and_2.py; at
    stage 2 the hook reduces whatever overlap_comm is, the stream is chosen by it, and so is the second buffer."""
    import inspect

    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    notebook = (Path(__file__).resolve().parents[1] / "solutions" / "02_zero_stages.py").read_text()
    assert "`lesson.OVERLAP_COMM`" in notebook and "reduced after the backward pass" not in notebook
    assert inspect.getsourcefile(DeepSpeedZeroOptimizer).endswith("deepspeed/runtime/zero/stage_1_and_2.py")
    for method, number, text in zero_stages.OVERLAP_COMM:
        source, first = inspect.getsourcelines(getattr(DeepSpeedZeroOptimizer, method))
        assert source[number - first].strip() == text, (method, number, source[number - first])
    # the reduction in the hook is not conditional on overlap_comm: nothing between the full-bucket test and the call
    hook, first = inspect.getsourcelines(DeepSpeedZeroOptimizer.reduce_independent_p_g_buckets_and_remove_grads)
    assert "overlap_comm" not in "".join(hook[1422 - first : 1424 - first])
    # average_tensor: the side stream only under overlap_comm, else the current stream (the branch right before)
    avg, first = inspect.getsourcelines(DeepSpeedZeroOptimizer.average_tensor)
    assert avg[1600 - first].strip() == "elif self.overlap_comm:" and avg[1613 - first].strip() == "else:"
    # setup_buckets: the first buffer always, the second under `if self.overlap_comm:`
    setup = "".join(inspect.getsourcelines(DeepSpeedZeroOptimizer.setup_buckets)[0])
    assert setup.count("torch.empty(int(self.reduce_bucket_size)") == 2
    assert (
        setup.index("buf_0 = torch.empty") < setup.index("if self.overlap_comm:") < setup.index("buf_1 = torch.empty")
    )
    # stage 2 is DeepSpeed's partition_grads (runtime/engine.py), which sends every gradient to the bucket
    from deepspeed.runtime import engine

    assert "partition_grads=zero_stage == ZeroStageEnum.gradients," in inspect.getsource(engine)


def test_each_key_the_own_key_exercise_suggests_has_a_reference_run_that_acts_as_its_config_predicts():
    """02's own-key exercise suggests `OWN_KEYS`, each with the GPU reference's stage 3 run of that key alone beside
    the learner's; what each changes in the model states on one GPU is what `states_change_mib` predicts from the
    two configs (the contiguous bucket gone; overlap off: the same buffers)."""
    stage3 = json.loads((REFERENCE_DIR / "runs" / "stage3" / "results.json").read_text())
    for key, run in zero_stages.OWN_KEYS.items():
        r = json.loads((REFERENCE_DIR / "runs" / run / "results.json").read_text())
        assert (r["experiment"], r["config"]["ds_config"], r["num_params"]) == ("stage3", [key], stage3["num_params"])
        measured = r["gpu_states_allocated_mib"] - stage3["gpu_states_allocated_mib"]
        assert measured == pytest.approx(zero_stages.states_change_mib(r, stage3), abs=8)  # MiB
