"""Does the run order decide notebook 02's speed ranking on a CPU? Notebook 02's four runs (baseline, stage1,
stage2, stage3) as the notebook makes them (`lessons.run_config`, `lessons.notebook_run_options`: the tiny model,
`lessons.GPU_MAX_STEPS` steps), in one fresh process per case, forwards and reversed, without and with
`lessons.warm_up` first, each case `--rounds` times. Writes each run's steady tokens/s and its rank into
workshop_lessons/reference/cpu/run_order.csv and workshop_lessons/reference/cpu/run_order.md (on a CPU; a GPU has nothing to show here).

    python scripts/cpu_run_order.py [--rounds 2]   # each case twice: about 12 minutes on 2 shared cores
    python scripts/cpu_run_order.py --report       # the .md again from the .csv
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from workshop_lib.results import title, unit  # noqa: E402 - after the path

OUT = ROOT / "workshop_lessons" / "reference" / "cpu"
NOTEBOOK, ORDER = "02_zero_stages", ["baseline", "stage1", "stage2", "stage3"]
TPS = "steady_train_tokens_per_second"


def one(order: list[str], warm: bool, runs: str) -> dict[str, float]:
    """In this process: the warm-up (if `warm`), then the runs in `order`; run -> steady tokens/s."""
    import workshop_lessons as lessons
    from workshop_lib.train import run_experiment

    common = lessons.notebook_run_options()
    if warm:
        lessons.warm_up(NOTEBOOK, runs, **common)
    return {
        n: run_experiment(lessons.run_config(NOTEBOOK, n, runs, **common))["steady_train_tokens_per_second"]
        for n in order
    }


def main(rounds: int) -> int:
    import pandas as pd

    from workshop_lib import env

    rows = []
    for r in range(1, rounds + 1):
        for warm in (False, True):
            for label, order in (("forwards", ORDER), ("reversed", ORDER[::-1])):
                with tempfile.TemporaryDirectory() as runs:
                    p = subprocess.run(
                        [sys.executable, __file__, "--one", json.dumps([order, warm, runs])],
                        capture_output=True,
                        text=True,
                    )
                if p.returncode:
                    print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                    return p.returncode
                speeds = json.loads(p.stdout.strip().splitlines()[-1])
                ranked = sorted(speeds, key=speeds.get, reverse=True)
                for position, name in enumerate(order, 1):
                    rows.append(
                        {
                            "round": r,
                            "warm-up": warm,
                            "order": label,
                            "position": position,
                            "run": name,
                            title(TPS): speeds[name],
                            "rank (1 = fastest)": ranked.index(name) + 1,
                        }
                    )
                print(f"round {r}, warm-up {warm}, {label}: {speeds}", flush=True)
    df = pd.DataFrame(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT / "run_order.csv", index=False)
    (OUT / "run_order.md").write_text(report(df, env.device_name(), time.strftime("%Y-%m-%d")))
    return 0


def _contradictions(verdicts: dict) -> str:
    """A sentence: the stages called higher in one process and lower in another (there the order decides)."""
    both = [n for i, n in enumerate(ORDER[1:]) if {"higher", "lower"} <= {vs[i] for vs in verdicts.values()}]
    if both:
        return f"{', '.join(both)} faster than the baseline in one process and slower in another: the order decides."
    return "No stage is faster than the baseline in one process and slower in another: the order decides no verdict."


def report(df, device: str, date: str) -> str:
    """workshop_lessons/reference/cpu/run_order.md from the measurements (workshop_lessons/reference/cpu/run_order.csv's rows): steady tokens/s per run,
    case and round; per process, each stage's verdict against that process's baseline in the CPU's band (the
    order decides nothing where every process gives the same); each run's speed without the warm-up over its
    speed with it; and
    the spread of a run's speed relative to its process's baseline after the warm-up (`lessons.cpu_band`)."""
    import workshop_lessons as lessons

    wide = df.pivot_table(index="run", columns=["warm-up", "order", "round"], values=title(TPS)).loc[ORDER]
    wide.columns = [f"{'warm-up' if w else 'no warm-up'}, {o}, #{r}" for w, o, r in wide.columns]
    lines, band = [], lessons.cpu_band(df)
    for warm, g in df.groupby("warm-up"):
        verdicts = {}  # (round, order) -> each stage against the baseline of its process, in the CPU's band
        for (r, o), c in g.groupby(["round", "order"]):
            speed = c.set_index("run")[title(TPS)]
            verdicts[(r, o)] = tuple(
                lessons.Comparison(TPS, unit(TPS), speed[n], speed["baseline"], band).verdict for n in ORDER[1:]
            )
        lines.append(
            f"- {'With' if warm else 'Without'} the warm-up, each stage against its process's baseline "
            f"(band ±{band:.0%}): "
            + "; ".join(
                f"{o} #{r}: " + ", ".join(f"{n} {v}" for n, v in zip(ORDER[1:], vs)) for (r, o), vs in verdicts.items()
            )
            + ". "
            + _contradictions(verdicts)
        )
    both = df.pivot_table(index=["round", "order", "run"], columns="warm-up", values=title(TPS))
    slow = (both[False] / both[True]).unstack("run")[ORDER]  # without the warm-up / with it, same round and order
    lines.append(
        "- Speed without the warm-up over speed with it, the same run in the same round and order: "
        + "; ".join(
            f"#{r} {o}: " + ", ".join(f"{n} {v:.2f}" for n, v in row.items()) for (r, o), row in slow.iterrows()
        )
        + f". The slowest, {slow.min().min():.2f}, is a run {1 / slow.min().min():.0f}x slower than itself after the warm-up."
    )
    lines.append(
        f"- With the warm-up, a run's tokens/s over its process's baseline's varied by up to "
        f"{band:.0%} between processes (|a - b| / mean): `lessons.cpu_band`, the band of "
        "the speed verdicts on a CPU."
    )
    return (
        f"# Notebook 02's runs on a CPU: does the run order decide the ranking?\n\n"
        f"`python scripts/cpu_run_order.py` on {device}, {date} (the machine shared with other work): steady "
        "tokens/s of the tiny model, each column one fresh process running the four runs in the order named, "
        "as notebook 02 makes them.\n\n"
        + wide.round(0).astype(int).map("{:,}".format).T.to_markdown()
        + "\n\n"
        + "\n".join(lines)
        + "\n"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == [
        "--report"
    ]:  # workshop_lessons/reference/cpu/run_order.md again from workshop_lessons/reference/cpu/run_order.csv
        import pandas as pd

        first = (OUT / "run_order.md").read_text().split("`python scripts/cpu_run_order.py` on ")[1]
        device, date = first.split(" (the machine")[0].rsplit(", ", 1)
        (OUT / "run_order.md").write_text(report(pd.read_csv(OUT / "run_order.csv"), device, date))
        sys.exit(0)
    if sys.argv[1:2] == ["--one"]:
        order, warm, runs = json.loads(sys.argv[2])
        print(json.dumps(one(order, warm, runs)))
        sys.exit(0)
    sys.exit(main(int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 2))
