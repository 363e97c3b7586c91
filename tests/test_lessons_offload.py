"""Notebook 03's figures and verdicts (`workshop_lessons.offload`) against the results they were computed
from: the H100 reference runs (workshop_lessons/reference/h100/course) and the tiny runs on this machine."""

import json

import pytest

import workshop_lessons as lessons
from workshop_lessons import REFERENCE_DIR, offload
from workshop_lessons.baseline import speed

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

