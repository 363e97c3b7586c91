"""Restate the steady-state figures of recorded runs under today's definition (`metrics.steady_state`: the warm-up
found from the run's own step log, then all the steady tokens over all the steady time), from each run's
train_log.csv: warmup_steps, steady_steps, steady_step_time_s, steady_train_samples_per_second and
steady_train_tokens_per_second, with MFU and HFU scaled by the new tokens/s over the old (both are linear in it);
the retired median-step key goes. Runs without a train_log.csv are left as they are. Run once over the reference
folders when the definition changes:

    python scripts/restate_steady.py workshop_lessons/reference docs
"""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workshop_lib import metrics  # noqa: E402
from workshop_lib.rundir import atomic_path  # noqa: E402

RETIRED = "steady_window_tokens_per_second"


def restate(run: Path) -> tuple[float | None, float | None] | None:
    """(old, new) steady tokens/s of one run folder, its results.json rewritten; None where it has no step log."""
    log_path, res_path = run / "train_log.csv", run / "results.json"
    log = pd.read_csv(log_path) if log_path.is_file() else pd.DataFrame()
    if "step_time_s" not in log:
        return None
    res = json.loads(res_path.read_text())
    log = log.dropna(subset=["step_time_s"])
    old_tps, old_step = res.get("steady_train_tokens_per_second"), res.get("steady_step_time_s")
    compiles = log["compiles"].astype(int).tolist() if "compiles" in log else None
    questions = (res["steady_train_samples_per_second"] or 0) * (old_step or 0)  # sequences per step (mean)
    new = metrics.steady_state(log["step_time_s"].tolist(), log["tokens"].astype(int).tolist(), questions, compiles)
    if old_tps and new["steady_train_tokens_per_second"]:
        for k in ("mfu", "hfu"):
            if res.get(k) is not None:
                res[k] = round(res[k] * new["steady_train_tokens_per_second"] / old_tps, 4)
    res = {k: v for k, v in (res | new).items() if k != RETIRED}
    with atomic_path(res_path) as tmp:
        tmp.write_text(json.dumps(res, indent=2) + "\n")
    return old_tps, new["steady_train_tokens_per_second"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path)
    for folder in p.parse_args().folders:
        for res in sorted(folder.rglob("results.json")):
            moved = restate(res.parent)
            if moved:
                old, new = moved
                change = f"{new / old - 1:+.1%}" if old and new else ""
                print(f"{res.parent}: {old} -> {new} tokens/s {change}")


if __name__ == "__main__":
    main()
