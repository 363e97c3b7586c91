"""Notebook 01's figures and verdicts (`workshop_lessons.baseline`) against the results they were computed
from: the GPU reference runs (workshop_lessons.REFERENCE_DIR and the H100 ones) and real tiny runs on this machine; and the verdict itself
(`lessons.Comparison`), inside and outside a band. A wrong figure fails here."""

import json
import math
from pathlib import Path

import pytest

import workshop_lessons as lessons
from conftest import workshop
from workshop_lessons import REFERENCE, REFERENCE_DIR, baseline

NAMES = ("baseline", "baseline_classic", "baseline_accum4")


def test_a_difference_inside_the_band_is_within_the_band_not_a_finding():
    inside = lessons.Comparison("steady_train_tokens_per_second", "tokens/s", 102_526, 102_510, band=0.087)
    assert inside.verdict == "within the band" and inside.band_text == "±8.7%"
    outside = lessons.Comparison("steady_train_tokens_per_second", "tokens/s", 36_787, 102_510, band=0.087)
    assert outside.verdict == "lower" and math.isclose(outside.ratio, 36_787 / 102_510)
    # the sentence the solutions print: a ratio inside the band is named noise, one outside names its verdict
    assert inside.ratio_text == "1.00x, within the band (±8.7%): the same within the noise"
    assert outside.ratio_text == "0.36x (lower; band ±8.7%)"
    assert lessons.Comparison("x", "MiB", 2.0, 1.0).verdict == "higher"  # no band: any difference decides
    assert lessons.Comparison("x", "MiB", 1.0, 1.0).verdict == "equal"
    assert lessons.Comparison("x", "MiB", 1.0, 1.0, band=0.0).verdict == "within the band"
    # compare() takes the band measured on the reference runs, and the unit from results.UNITS
    c = lessons.compare("steady_train_tokens_per_second", 1.0, 1.0)
    assert c.band == pytest.approx(lessons.band("steady_train_tokens_per_second")) and c.unit == "tokens/s"


def test_the_cpu_band_is_the_spread_of_a_runs_speed_over_its_baseline_between_processes():
    """workshop_lessons/reference/cpu/run_order.csv (scripts/cpu_run_order.py): per warmed-up process, each run's steady tokens/s over
    that process's baseline's; the band is the largest spread of one run's ratio between processes. Wider than
    the H100's band, so a CPU speed verdict within it is noise."""
    import pandas as pd

    df = pd.read_csv(lessons.CPU_RUN_ORDER)
    wide = df[df["warm-up"]].pivot_table(index=["round", "order"], columns="run", values="steady tokens/s")
    ratio = wide.div(wide["baseline"], axis=0).drop(columns="baseline")
    a, b = ratio.max(), ratio.min()  # the two processes furthest apart, per run
    assert lessons.cpu_band() == pytest.approx(((a - b) / ((a + b) / 2)).max())
    cpu_run = {"gpu_peak_mib": None, "steady_train_tokens_per_second": 100.0}
    c = baseline.compare_speed(
        cpu_run, cpu_run | {"steady_train_tokens_per_second": 100.0 * (1 + lessons.cpu_band() / 2)}
    )
    assert c.band == lessons.cpu_band() and c.verdict == "within the band"


def _check(base, classic, accum):
    f = baseline.figures(base, classic, accum)
    (b, kind), (c, _), (a, _) = baseline.speed(base), baseline.speed(classic), baseline.speed(accum)
    assert (f.speed.value, f.speed.other, f.speed_kind) == (b, c, kind)
    on_gpu = base["gpu_peak_mib"] is not None  # a CPU run's speeds differ far more: the band measured there
    assert f.speed.band == pytest.approx(
        lessons.band("steady_train_tokens_per_second") if on_gpu else lessons.cpu_band()
    )
    mean, max_len = classic["data_stats"]["train"]["mean_tokens"], classic["config"]["max_length"]
    assert f.padding_fraction == pytest.approx(1 - mean / max_len)
    assert f.padding_speedup_bound == pytest.approx(max_len / mean)
    (pb, what), (pa, _) = baseline.peak(base), baseline.peak(accum)
    assert (f.accum_speed.ratio, f.accum_peak.ratio, f.peak_what) == (
        pytest.approx(a / b),
        pytest.approx(pa / pb),
        what,
    )
    assert (f.accum_loss.value, f.accum_loss.other) == (accum["train_loss"], base["train_loss"])
    assert f.tokens_per_micro_batch == (
        base["config"]["max_tokens_per_micro_batch"],
        accum["config"]["max_tokens_per_micro_batch"],
    )
    assert f.loss_on == {"default": base["loss_on"], "classic": classic["loss_on"]}
    return f


def test_figures_agree_with_the_h100_reference_runs():
    r = {n: json.loads((REFERENCE_DIR / "runs" / n / "results.json").read_text()) for n in NAMES}
    f = _check(*(r[n] for n in NAMES))
    base = r["baseline"]
    assert f.speed.verdict == "higher" and f.speed.ratio > f.padding_speedup_bound  # padding is not all of it
    bpp = base["gpu_states_allocated_mib"] * 2**20 / base["num_params"]
    assert f.states_bytes_per_param == pytest.approx(bpp) and f.gradients_freed == (bpp < 14)
    n = f.nvml
    assert n.nvml_mib == base["gpu_peak_mib"] and n.outside_mib == pytest.approx(
        base["gpu_peak_mib"] - base["gpu_peak_reserved_mib"]
    )
    assert n.allocated_mib + n.cached_mib + n.outside_mib == pytest.approx(n.nvml_mib)
    assert f.peak_over_states == pytest.approx(base["gpu_peak_allocated_mib"] / base["gpu_states_allocated_mib"])


@pytest.fixture(scope="module")
def tiny_01(tiny_runs, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs01")
    workshop(
        "run", "baseline", "--tiny", "--recipe", "classic", "--save-strategy", "no", "--output-dir", root / "classic"
    )
    workshop(
        "run",
        "baseline",
        "--tiny",
        "--max-tokens-per-micro-batch",
        1536,
        "--gradient-accumulation-steps",
        4,
        "--save-strategy",
        "no",
        "--output-dir",
        root / "accum4",
    )
    return [
        json.loads((d / "results.json").read_text())
        for d in (tiny_runs / "baseline", root / "classic", root / "accum4")
    ]


def test_figures_agree_with_tiny_runs_on_this_machine(tiny_01):
    f = _check(*tiny_01)
    if tiny_01[0]["gpu_states_allocated_mib"] is None:  # CPU: no GPU figures, the host's peak instead
        assert f.states_bytes_per_param is None and f.nvml is None and f.gradients_freed is None
        assert f.peak_what.startswith("host peak RSS") and f.accum_peak.metric == "host_peak_rss_mib"


def test_the_recipe_table_is_what_a_run_used_on_this_machine(tiny_runs):
    """Issue 39 (7): `baseline.recipe_here`, the table notebook 01 prints under the default recipe, lists each setting
    a run changes from the recipe with the value the run used (results.json's resolved config), and every setting
    it leaves out is the recipe's: here the tiny baseline run made by `workshop run baseline --tiny`."""
    from workshop_lib.config import RECIPE_FIELDS, RunConfig, recipe_settings

    d = tiny_runs / "baseline"
    ran = json.loads((d / "results.json").read_text())["config"]
    table = baseline.recipe_here(RunConfig("baseline", tiny=True, output_dir=str(d))).set_index("setting")
    recipe = recipe_settings("default") | {"tiny": False, "random_weights": False, "max_steps": None}
    for k in [*RECIPE_FIELDS, "tiny", "random_weights", "max_steps"]:
        v = ran[k]
        shown = f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)
        if k in table.index:
            assert table.at[k, "this notebook's runs here"] == shown and v != recipe[k]
        else:
            assert v == recipe[k], k
    if ran["precision"] == "fp32":  # a CPU: the machine, not the recipe, dropped bf16 and compilation
        assert table.loc[["precision", "torch_compile"], "changed by"].str.startswith("this machine").all()


def _answers(runs: dict) -> dict[str, str]:
    """Notebook 01's answers as its solution cell prints them from `runs` (results.json by run name): number -> line."""
    import contextlib
    import io
    import re
    from pathlib import Path

    src = (Path(__file__).resolve().parents[1] / "solutions" / "01_baseline.py").read_text()
    cell = next(c for c in re.split(r"^# %%", src, flags=re.M) if c.startswith(' tags=["solution"]'))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell.split("\n", 1)[1], {"f": baseline.figures(*(runs[n] for n in NAMES))})
    return {line.split(".", 1)[0]: line for line in out.getvalue().splitlines() if line[:1].isdigit()}


# every complete set of the course's GPU runs on file: today's reference, and the H100's and its repeat
COURSE_SETS = [REFERENCE_DIR / "runs", REFERENCE / "h100/course/runs", REFERENCE / "h100/course/repeat"]


def _reference(where: Path = REFERENCE_DIR / "runs") -> dict:
    return {n: json.loads((where / n / "results.json").read_text()) for n in NAMES}


@pytest.mark.parametrize("where", COURSE_SETS, ids=lambda d: f"{d.parent.parent.name}-{d.name}")
def test_answer_3_counts_the_logits_computed_only_where_labelled(where):
    """Issue 39 (8): answer 3 names, beside the padding, the LM head computed only at the labelled positions: their
    share of the default run's tokens (data_stats), against every position of the classic run's head, as wide as
    its model's vocabulary (bloom-560m: 250,880); the other settings it lists are those the two runs ran
    differently."""
    from workshop_lib.model import count_params

    r = _reference(where)
    f = baseline.figures(*(r[n] for n in NAMES))
    train = r["baseline"]["data_stats"]["train"]
    assert f.labelled_fraction == pytest.approx(train["labelled_tokens"] / train["tokens"])
    assert round(f.labelled_fraction, 3) == 0.027  # the 2.7%
    assert f.logits_on == {"default": "labelled", "classic": "all"} and r["baseline_classic"]["loss_on"] == "all"
    assert f.head_width["classic"] == count_params("bigscience/bloom-560m")["vocab_size"] == 250_880
    assert f.differences == {
        "model": ("Qwen/Qwen3-0.6B", "bigscience/bloom-560m"),
        "precision": ("bf16", "fp16"),
        "attn_implementation": ("sdpa", "eager"),
        "torch_compile": (True, False),
    }
    three = _answers(r)["3"]
    assert (
        f"logits only at the labelled positions ({f.labelled_fraction:.1%} of the default run's tokens) where "
        f"classic computes them at every position, 250,880 wide"
    ) in three
    assert "more work per kernel" not in three and "precision bf16 against fp16" in three


@pytest.mark.parametrize("where", COURSE_SETS, ids=lambda d: f"{d.parent.parent.name}-{d.name}")
def test_answer_4_sets_each_micro_batchs_arithmetic_against_its_time(where):
    """Issue 39 (9): answer 4 splits the time of one micro-batch (steady step time / micro-batches per step) into its
    arithmetic at the GPU's peak (the model FLOPs of its tokens, `metrics.run_flops_per_token`, over `gpus.peak_flops`;
    = MFU x the time) and the rest. On the H100 reference the rest is the same per micro-batch, within the step
    time's band, at 3,847 and 14,928 tokens: an overhead each micro-batch pays, 4 times a step with accumulation 4;
    the arithmetic of accum4's micro-batch is under a tenth of its time. A change that broke this would fail here."""
    from workshop_lib import gpus, metrics
    from workshop_lib.model import architecture_config

    r = _reference(where)
    f = baseline.figures(*(r[n] for n in NAMES))
    for mb, run in zip(f.micro_batches, (r["baseline"], r["baseline_accum4"])):
        n = run["gradient_accumulation_steps"]
        assert mb.count == n and mb.ms == pytest.approx(run["steady_step_time_s"] * 1000 / n)
        assert mb.tokens == pytest.approx(run["tokens_per_step"] / n)
        c, s = architecture_config(run["config"]["model"]), run["data_stats"]["train"]
        flops, _ = metrics.run_flops_per_token(
            run["num_params"],
            c.num_hidden_layers,
            c.num_attention_heads * c.head_dim,
            c.vocab_size * c.hidden_size,
            s["tokens"],
            s["used"],
            s["labelled_tokens"],
            True,
            False,
        )
        # the same arithmetic from the FLOPs per token of the epoch's mean sequence, on the steady steps' tokens
        steady_tokens = run["steady_train_tokens_per_second"] * run["steady_step_time_s"] / n
        assert mb.arithmetic_ms == pytest.approx(
            steady_tokens * flops / gpus.peak_flops(run["device"]) * 1000, rel=0.02
        )
    base, accum = f.micro_batches
    assert accum.other_ms > accum.arithmetic_ms  # a quarter-size micro-batch: mostly not arithmetic
    assert f.other_ms.band == pytest.approx(lessons.band("steady_step_time_s"))
    four = _answers(r)["4"]
    assert (
        f"{accum.tokens:,.0f} tokens took {accum.ms:,.0f} ms against {base.ms:,.0f} ms for the baseline's "
        f"{base.tokens:,.0f}"
    ) in four
    assert (
        f"is {accum.arithmetic_ms:,.0f} and {base.arithmetic_ms:,.0f} ms; the rest, {accum.other_ms:,.0f} and "
        f"{base.other_ms:,.0f} ms, "
    ) in four
    one_overhead = f.other_ms.verdict == "within the band"  # the reference's two rests: one overhead, or not
    assert ("an overhead every micro-batch pays" in four) == one_overhead != ("why is not measured" in four)
    assert "work per kernel" not in four
    # rests that differ beyond the band are not called one overhead
    slower = r | {
        "baseline_accum4": r["baseline_accum4"] | {"steady_step_time_s": 4 * r["baseline_accum4"]["steady_step_time_s"]}
    }
    assert "an overhead every" not in _answers(slower)["4"] and "why is not measured" in _answers(slower)["4"]


def test_the_answers_on_this_machine_say_what_its_runs_measured(tiny_01):
    """Issues 39 (8, 9) on this machine's tiny runs: the labelled share is the tiny data's, and without a GPU
    peak answer 4 splits nothing and says the cause is not measured."""
    r = dict(zip(NAMES, tiny_01))
    f = baseline.figures(*tiny_01)
    a = _answers(r)
    assert f"({f.labelled_fraction:.1%} of the default run's tokens)" in a["3"]
    if tiny_01[0]["mfu"] is None:  # a CPU
        assert f.other_ms is None and "what the time is spent on is not measured here" in a["4"]
