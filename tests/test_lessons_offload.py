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
        line = next(t for t in text if t.startswith(f"2. {s}:"))
        assert f"{bpp:.1f} bytes per parameter" in line
        assert ("more; possible reasons" in line) == (gpu and bpp > 12) and ("says little here" in line) == (not gpu)
        if gpu:
            d = r[o]["gpu_peak_allocated_mib"] - r[s]["gpu_peak_allocated_mib"]
            assert any(t.startswith(f"1. {s}:") and f"peak allocated by {d:+,.0f} MiB" in t for t in text)
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


def test_answers_agree_with_tiny_runs_on_this_machine(tiny_runs):
    _check({n: json.loads((Path(tiny_runs) / n / "results.json").read_text()) for n in NAMES})
