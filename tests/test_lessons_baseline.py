"""Notebook 01's answers (`workshop_lib.lessons.baseline`) against the results they were computed from: the
H100 reference runs (docs/h100/course) and real tiny runs on this machine. A wrong claim fails here."""

import json
import re
from pathlib import Path

import pytest

from conftest import workshop
from workshop_lib.lessons import REFERENCE_DIR, baseline

NAMES = ("baseline", "baseline_classic", "baseline_accum4")


def _check(base, classic, accum):
    text = baseline.answers(base, classic, accum)
    (b, _), (c, _), (a, _) = baseline.speed(base), baseline.speed(classic), baseline.speed(accum)
    assert f"{b / c:.1f}x {'faster' if b >= c else 'slower'}" in text[2]
    pad = 1 - classic["data_stats"]["train"]["mean_tokens"] / classic["config"]["max_length"]
    assert f"{pad:.0%} of the tokens" in text[1]
    (pb, _), (pa, _) = baseline.peak(base), baseline.peak(accum)
    assert f"{a / b:.2f}x the tokens/s and {pa / pb:.2f}x" in text[3]
    assert ("did not trade memory for speed" in text[3]) == (not (pa < pb and a < b))
    assert f"loss {base['train_loss']} against {accum['train_loss']}" in text[3]
    return text


def test_answers_agree_with_the_h100_reference_runs():
    r = {n: json.loads((REFERENCE_DIR / "runs" / n / "results.json").read_text()) for n in NAMES}
    text = _check(*(r[n] for n in NAMES))
    bpp = r["baseline"]["gpu_states_allocated_mib"] * 2**20 / r["baseline"]["num_params"]
    assert f"{bpp:.1f} bytes/param" in text[4] and ("frees the gradients" in text[4]) == (bpp < 14)
    outside = r["baseline"]["gpu_peak_mib"] - r["baseline"]["gpu_peak_reserved_mib"]
    assert f"+ {outside:,.0f} MiB outside" in text[5]


@pytest.fixture(scope="module")
def tiny_01(tiny_runs, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs01")
    workshop("run", "baseline", "--tiny", "--recipe", "classic", "--save-strategy", "no", "--output-dir", root / "classic")
    workshop("run", "baseline", "--tiny", "--max-tokens-per-micro-batch", 1536, "--gradient-accumulation-steps", 4,
             "--save-strategy", "no", "--output-dir", root / "accum4")
    return [json.loads((d / "results.json").read_text())
            for d in (tiny_runs / "baseline", root / "classic", root / "accum4")]


def test_answers_agree_with_tiny_runs_on_this_machine(tiny_01):
    base, classic, accum = tiny_01
    text = _check(base, classic, accum)
    if base["gpu_states_allocated_mib"] is None:  # CPU: no GPU sentence, no "None MiB"
        assert text[4].startswith("5. no GPU") and len(text) == 5
    assert not any(re.search(r"None|nan", t) for t in text)
