"""Notebook 03's answers (`workshop_lib.lessons.offload`) against the results they were computed from: the
H100 reference runs (docs/h100/course) and the tiny runs on this machine. A wrong claim fails here."""

import json
import re
from pathlib import Path

from workshop_lib.lessons import REFERENCE_DIR, offload
from workshop_lib.lessons.baseline import speed

NAMES = ["stage2", "stage2_offload", "stage3", "stage3_offload"]


def _check(r):
    text = offload.answers(r)
    gpu = r["stage2"]["gpu_peak_allocated_mib"] is not None
    for s in ("stage2", "stage3"):
        o = f"{s}_offload"
        assert any(t.startswith(f"1. {s}:") and f"{speed(r[o])[0] / speed(r[s])[0]:.2f}x the tokens/s" in t for t in text)
        bpp = (r[o]["host_states_rss_mib"] - r[s]["host_states_rss_mib"]) * 2**20 / r[o]["num_params"]
        peak = (r[o]["host_peak_rss_mib"] - r[s]["host_peak_rss_mib"]) * 2**20 / r[o]["num_params"]
        line = next(t for t in text if t.startswith(f"2. {s}:"))
        assert f"{bpp:.1f} bytes per parameter (peak RSS over the steps: {peak:.1f})" in line
        assert ("more; possible reasons" in line) == (gpu and bpp > 12) and ("says little here" in line) == (not gpu)
        if gpu:
            d = r[o]["gpu_peak_allocated_mib"] - r[s]["gpu_peak_allocated_mib"]
            one = next(t for t in text if t.startswith(f"1. {s}:"))
            assert f"peak allocated by {d:+,.0f} MiB" in one
            kept = {n: r[n]["gpu_states_allocated_mib"] - (r[n].get("gpu_allocated_at_start_mib") or 0) for n in (s, o)}
            assert f"model states kept on the GPU by {kept[o] - kept[s]:+,.0f} MiB" in one
            assert ("Offload was expected to lower the model states" in one) == (kept[o] >= kept[s])
        else:
            assert any(t.startswith(f"1. {s}: no GPU here") for t in text)
    assert not any(re.search(r"None|nan", t) for t in text)
    return text


def test_answers_agree_with_the_h100_reference_runs():
    r = {n: json.loads((REFERENCE_DIR / "runs" / n / "results.json").read_text()) for n in NAMES}
    text = _check(r)
    saved = {s: r[s]["gpu_peak_allocated_mib"] - r[f"{s}_offload"]["gpu_peak_allocated_mib"] for s in ("stage2", "stage3")}
    line = next(t for t in text if t.startswith("3."))
    assert line.startswith("3. Neither offload") == (max(saved.values()) <= 0)
    for o in ("stage2_offload", "stage3_offload"):  # model states net of what the process held at the start
        assert r[o]["gpu_allocated_at_start_mib"] is not None
        assert f"{offload.states(r[o]):,.0f}" in line
        assert f"{r[o]['gpu_peak_allocated_mib'] - offload.states(r[o]):,.0f}" in line
    d3 = r["stage3"]["gpu_peak_allocated_mib"] - r["stage2"]["gpu_peak_allocated_mib"]
    assert f"ZeRO-3 without offload peaked {d3:+,.0f} MiB from ZeRO-2's" in line
    assert ("outweighs the parameters that offload removes" in line) == (
        r["stage3_offload"]["gpu_peak_allocated_mib"] > r["stage2_offload"]["gpu_peak_allocated_mib"])


def test_fallback_when_offload_did_not_lower_the_model_states():
    """The H100 reference runs, once as measured (offload's model states fell: no fallback), once with stage2's
    and stage2_offload's model states swapped (the fallback, naming what the run began with), and once more
    without gpu_allocated_at_start_mib (the fallback for runs that did not record it)."""
    r = {n: json.loads((REFERENCE_DIR / "runs" / n / "results.json").read_text()) for n in NAMES}
    one = next(t for t in _check(r) if t.startswith("1. stage2:"))
    assert "Offload was expected" not in one
    k = "gpu_states_allocated_mib"
    r["stage2"][k], r["stage2_offload"][k] = r["stage2_offload"][k], r["stage2"][k]
    one = next(t for t in _check(r) if t.startswith("1. stage2:"))
    assert "Offload was expected" in one and f"began with {r['stage2_offload']['gpu_allocated_at_start_mib']:,.0f} MiB" in one
    for n in ("stage2", "stage2_offload"):
        del r[n]["gpu_allocated_at_start_mib"]
    one = next(t for t in _check(r) if t.startswith("1. stage2:"))
    assert "did not record what the process held" in one


def test_answers_agree_with_tiny_runs_on_this_machine(tiny_runs):
    """CPU runs: no GPU sentence but 'no GPU here'; exercise 3 from the H100 reference runs, as the notebook
    passes them (lessons.reference), else a line that says none are on file."""
    from workshop_lib import lessons

    r = {n: json.loads((tiny_runs / n / "results.json").read_text()) for n in NAMES}
    ref = offload.reference_runs(lessons.reference("03_cpu_offload"))
    three = next(t for t in _check(r) if t.startswith("3."))
    assert "no GPU reference runs are on file" in three
    three = next(t for t in offload.answers(r, ref) if t.startswith("3."))
    assert three == "3. No GPU here, so no GPU memory was freed; on the GPU of the reference runs: " + \
        offload.compare_offloads(ref)[3:]
    assert f"{ref['stage3_offload']['gpu_peak_allocated_mib'] - offload.states(ref['stage3_offload']):,.0f}" in three
