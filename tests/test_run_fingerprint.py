"""The tiny runs against their fingerprint (tests/data/tiny_runs_fingerprint.json): per experiment, the fields of
results.json and of its config, the train losses step by step, the eval losses and the data counts. A change
that should change no behaviour (issue 25's refactoring) leaves all of them as they were; one that should, makes
the fingerprint again and says why in its commit:

    WORKSHOP_WRITE_FINGERPRINT=1 OMP_NUM_THREADS=1 pytest -m slow tests/test_run_fingerprint.py

The losses are compared to 1e-4 relative: fp32 on a CPU, the same torch; the thread count changes the order of
torch's reductions (OMP_NUM_THREADS=1 here and in scripts/test.sh's CI run on 2 cores)."""

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

FINGERPRINT = Path(__file__).parent / "data" / "tiny_runs_fingerprint.json"
TIMING = (
    "_s",
    "_mib",
    "seconds",
    "per_second",
    "mfu",
    "hfu",
    "util",
    "date",
    "time",
    "version",
    "host",
    "dir",
    "device",
    "pid",
    "memory",
    "warmup_steps",
    "steady_steps",
)  # fields whose values differ between two
# runs of the same code (the warm-up is found from the steps' times: metrics.steady_steps)


def fingerprint(run: Path) -> dict:
    """What a run of the same code on the same machine reproduces: field names, losses, counts."""
    r = json.loads((run / "results.json").read_text())
    log = pd.read_csv(run / "train_log.csv")
    steps = log[log["loss"].notna()]
    return {
        "fields": sorted(r),
        "config_fields": sorted(r["config"]),
        "train_losses": [round(float(x), 6) for x in steps["loss"]],
        "eval_losses": [round(float(x), 6) for x in log["eval_loss"].dropna()],
        "train_loss": round(float(r["train_loss"]), 6),
        "counts": {
            k: v
            for k, v in r.items()
            if isinstance(v, int) and not isinstance(v, bool) and not any(t in k for t in TIMING)
        },
        # the data's counts, not where the file was read (a path that names the checkout)
        "data_stats": {
            split: {k: v for k, v in stats.items() if k != "source"}
            for split, stats in (r.get("data_stats") or {}).items()
        },
    }


@pytest.mark.slow
def test_the_tiny_runs_match_their_fingerprint(tiny_runs):
    made = {e: fingerprint(tiny_runs / e) for e in tiny_runs.available()}
    if os.environ.get("WORKSHOP_WRITE_FINGERPRINT") == "1":
        FINGERPRINT.write_text(json.dumps(made, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {FINGERPRINT}")
    want = json.loads(FINGERPRINT.read_text())
    for e, got in made.items():
        assert e in want, f"{e} has no fingerprint: make it again (this file's docstring says how)"
        w = want[e]
        assert got["fields"] == w["fields"] and got["config_fields"] == w["config_fields"], e
        assert got["counts"] == w["counts"] and got["data_stats"] == w["data_stats"], e
        for key in ("train_losses", "eval_losses"):
            assert len(got[key]) == len(w[key]), (e, key)
            for a, b in zip(got[key], w[key]):
                assert math.isclose(a, b, rel_tol=1e-4), (e, key, got[key], w[key])
        assert math.isclose(got["train_loss"], w["train_loss"], rel_tol=1e-4), e
