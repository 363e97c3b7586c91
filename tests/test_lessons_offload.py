"""Notebook 03's figures and verdicts (`workshop_lessons.offload`) against the results they were computed
from: the H100 reference runs (workshop_lessons/reference/h100/course) and the tiny runs on this machine."""

import json

import pandas as pd
import pytest

import workshop_lessons as lessons
from workshop_lessons import REFERENCE_DIR, offload
from workshop_lessons.baseline import speed
from workshop_lib.errors import WorkshopError

NAMES = ["stage2", "stage2_offload", "stage3", "stage3_offload"]


def _check(r, ref=None):
    f = offload.figures(r, ref)
    for s in ("stage2", "stage3"):
        o, n, got = r[f"{s}_offload"], r[s], getattr(f, s)
        assert got.speed.ratio == pytest.approx(speed(o)[0] / speed(n)[0])
        assert got.host_states_bytes_per_param == pytest.approx(
            (o["host_states_rss_mib"] - n["host_states_rss_mib"]) * 2**20 / o["num_params"])
        assert got.estimated_host_bytes_per_param == pytest.approx(o["estimated_model_states_cpu_mib"] * 2**20 / o["num_params"])
        if f.on_gpu:
            assert got.gpu_peak.difference == pytest.approx(o["gpu_peak_allocated_mib"] - n["gpu_peak_allocated_mib"])
            kept = {k: v["gpu_states_allocated_mib"] - (v.get("gpu_allocated_at_start_mib") or 0) for k, v in (("o", o), ("n", n))}
            assert got.gpu_states.difference == pytest.approx(kept["o"] - kept["n"])
        else:
            assert got.gpu_states is None and got.gpu_peak is None
    return f


def test_figures_agree_with_the_h100_reference_runs():
    r = {n: json.loads((REFERENCE_DIR / "runs" / n / "results.json").read_text()) for n in NAMES}
    f = _check(r)
    assert f.peaks_from == "yours"
    for s in ("stage2", "stage3"):
        o = getattr(f, s)
        # offload lowers the model states and the peak, and costs speed beyond the band
        assert o.gpu_states.verdict == "lower" and o.gpu_peak.verdict == "lower" and o.speed.verdict == "lower"
        # the host grew by more than the 12 bytes/param of fp32 weights and Adam's moments
        assert o.host_states_bytes_per_param > 12
    # the offload runs' model states are net of what the process held when they began (64 MiB after a ZeRO-3 run)
    assert f.stage2.held_at_start_mib == r["stage2_offload"]["gpu_allocated_at_start_mib"]
    assert f.stage2.peak_beyond_states_mib == pytest.approx(r["stage2_offload"]["gpu_peak_allocated_mib"] - offload.states(r["stage2_offload"]))
    assert f.stage3_over_stage2_peak.difference == pytest.approx(
        r["stage3"]["gpu_peak_allocated_mib"] - r["stage2"]["gpu_peak_allocated_mib"])


def test_figures_agree_with_tiny_runs_on_this_machine(tiny_runs):
    """CPU runs: no GPU figures; exercise 3's from the H100 reference runs, as the notebook passes them
    (lessons.reference), else none."""
    r = {n: json.loads((tiny_runs / n / "results.json").read_text()) for n in NAMES}
    f = _check(r)
    if not f.on_gpu:
        assert f.peaks_from is None and f.peaks is None
        ref = offload.reference_runs(lessons.reference("03_cpu_offload"))
        g = _check(r, ref)
        assert g.peaks_from == "reference" and g.peaks["stage3"].gpu_peak.value == ref["stage3_offload"]["gpu_peak_allocated_mib"]


def _run(d, step_times, losses, gpu_peak=None):
    """A run directory as `workshop run` writes it, for 12 steps of 1,000 tokens each: results.json (the fields
    `offload.zenflow` reads), train_log.csv with an evaluation row after steps 4, 8 and 12, ds_config.json."""
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"warmup_steps": 4, "gpu_peak_allocated_mib": gpu_peak,
                                                "gpu_peak_mib": gpu_peak, "host_peak_rss_mib": 1000.0}))
    rows = []
    for step, (t, loss) in enumerate(zip(step_times, losses), start=1):
        rows.append({"step": step, "loss": loss, "eval_loss": None, "step_time_s": t, "tokens": 1000})
        if step % 4 == 0:
            rows.append({"step": step, "loss": None, "eval_loss": 9.0, "step_time_s": None, "tokens": None})
    pd.DataFrame(rows).to_csv(d / "train_log.csv", index=False)
    zf = {"topk_ratio": 0.1, "update_interval": 4, "overlap_step": False}
    (d / "ds_config.json").write_text(json.dumps({"zero_optimization": {"zenflow": zf}}))
    return d


def test_zenflow_speed_is_the_whole_windows_and_the_loss_the_last_cycles(tmp_path):
    """Steps 5-12 (after results.json's 4 warm-up steps): plain offload 1 s each; ZenFlow 0.5 s three steps in
    four and 2.5 s at each CPU update. All their tokens over their summed times: 8,000 / 8 s for both, 1.00x,
    where the median step (0.5 s) would make ZenFlow twice as fast. Losses over the last third in whole
    cycles of 4 steps (9-12): 10 - 0.1 x 10.5 = 8.95 for offload, 10 - 0.05 x 10.5 = 9.475 for ZenFlow."""
    steps = range(1, 13)
    off = _run(tmp_path / "off", [1.0] * 12, [10 - 0.1 * s for s in steps])
    zf = _run(tmp_path / "zf", [2.5 if s % 4 == 0 else 0.5 for s in steps], [10 - 0.05 * s for s in steps])
    z = offload.zenflow(off, zf)
    assert z.window == (5, 12) and z.last == 4 and z.update_interval == 4 and not z.overlap_step
    assert z.speed.value == pytest.approx(1000) and z.speed.other == pytest.approx(1000)
    assert z.speed.ratio == pytest.approx(1.0) and z.speed.verdict == "within the band"
    assert z.loss.other == pytest.approx(8.95) and z.loss.value == pytest.approx(9.475)
    assert z.loss.difference == pytest.approx(0.525) and z.loss.verdict == "higher"
    assert "+0.525 nats (higher" in z.loss.difference_text
    assert z.gpu_peak is None and z.host_peak.ratio == 1.0  # no GPU in these runs
    assert z.first_loss == pytest.approx((9.95, 9.9)) and not z.same_start  # step 1: before any update
    assert offload.zenflow(off, off).same_start


def test_zenflow_refuses_runs_of_different_steps(tmp_path):
    off = _run(tmp_path / "off", [1.0] * 12, [9.0] * 12)
    zf = _run(tmp_path / "zf", [1.0] * 8, [9.0] * 8)
    with pytest.raises(WorkshopError, match="ran different steps") as e:
        offload.zenflow(off, zf)
    assert "To fix:" in str(e.value)
