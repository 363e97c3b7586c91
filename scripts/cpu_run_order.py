"""Does the run order decide notebook 02's speed ranking on a CPU? Notebook 02's four runs (baseline, stage1,
stage2, stage3) as the notebook makes them (`lessons.run_config`, `env.notebook_run_options`: the tiny model,
`lessons.GPU_MAX_STEPS` steps), in one fresh process per case, forwards and reversed, without and with
`lessons.warm_up` first. Writes each run's steady tokens/s and its rank into docs/cpu/run_order.csv and
docs/cpu/run_order.md; the ranking "follows the order" when the runs got faster one after the other.

    python scripts/cpu_run_order.py            # about 8 minutes on 2 shared cores; on a CPU (a GPU: nothing to show)
    python scripts/cpu_run_order.py --report   # the .md again from the .csv
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "cpu"
NOTEBOOK, ORDER = "02_zero_stages", ["baseline", "stage1", "stage2", "stage3"]


def one(order: list[str], warm: bool, runs: str) -> dict[str, float]:
    """In this process: the warm-up (if `warm`), then the runs in `order`; run -> steady tokens/s."""
    from workshop_lib import env, lessons
    from workshop_lib.train import run_experiment

    common = env.notebook_run_options()
    if warm:
        lessons.warm_up(NOTEBOOK, runs, **common)
    return {n: run_experiment(lessons.run_config(NOTEBOOK, n, runs, **common))["steady_train_tokens_per_second"]
            for n in order}


def main() -> int:
    import pandas as pd

    from workshop_lib import env

    rows = []
    for warm in (False, True):
        for label, order in (("forwards", ORDER), ("reversed", ORDER[::-1])):
            with tempfile.TemporaryDirectory() as runs:
                p = subprocess.run([sys.executable, __file__, "--one", json.dumps([order, warm, runs])],
                                   capture_output=True, text=True)
            if p.returncode:
                print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                return p.returncode
            speeds = json.loads(p.stdout.strip().splitlines()[-1])
            ranked = sorted(speeds, key=speeds.get, reverse=True)
            follows = [speeds[n] for n in order] == sorted(speeds.values())  # each run faster than the one before
            for position, name in enumerate(order, 1):
                rows.append({"warm-up": warm, "order": label, "position": position, "run": name,
                             "steady tokens/s": speeds[name], "rank (1 = fastest)": ranked.index(name) + 1,
                             "ranking follows the order": follows})
            print(f"warm-up {warm}, {label}: {speeds}; follows the order: {follows}", flush=True)
    df = pd.DataFrame(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT / "run_order.csv", index=False)
    (OUT / "run_order.md").write_text(report(df, env.device_name(), time.strftime("%Y-%m-%d")))
    return 0


def report(df, device: str, date: str) -> str:
    """docs/cpu/run_order.md from the measurements (docs/cpu/run_order.csv's rows): steady tokens/s per run
    and case, the rank correlation of speed with position in the order (Spearman's: +1 when each run was
    faster than the one before), and whether the two orders ranked the runs alike."""
    wide = df.pivot_table(index="run", columns=["warm-up", "order"], values="steady tokens/s").loc[ORDER]
    wide.columns = [f"{'warm-up' if w else 'no warm-up'}, {o}" for w, o in wide.columns]
    lines = []
    for warm, g in df.groupby("warm-up"):
        rho = {o: c["position"].rank().corr(c["steady tokens/s"].rank()) for o, c in g.groupby("order")}  # Spearman
        ranks = {o: tuple(c.set_index("run").loc[ORDER, "rank (1 = fastest)"]) for o, c in g.groupby("order")}
        fastest = {o: c.loc[c["steady tokens/s"].idxmax(), "run"] for o, c in g.groupby("order")}
        lines.append(f"- {'With' if warm else 'Without'} the warm-up: speed against position in the order, "
                     + ", ".join(f"{o} {r:+.1f}" for o, r in rho.items())
                     + f"; fastest run {', '.join(f'{o} {f}' for o, f in fastest.items())}; the two orders rank the "
                     f"runs {'alike' if len(set(ranks.values())) == 1 else 'differently'} "
                     f"({'; '.join(f'{o}: ' + ', '.join(f'{n} {r}' for n, r in zip(ORDER, rk)) for o, rk in ranks.items())}).")
    from workshop_lib import lessons

    spread = lessons.cpu_band(df)
    lines.append(f"- With the warm-up, one run's steady tokens/s in the two processes differ by up to {spread:.0%} "
                 "(|a - b| / mean): `lessons.cpu_band`, the band of the speed verdicts on a CPU.")
    return (f"# Notebook 02's runs on a CPU: does the run order decide the ranking?\n\n"
            f"`python scripts/cpu_run_order.py` on {device}, {date} (the machine shared with other work): steady "
            "tokens/s of the tiny model, each column one fresh process running the four runs in the order named, "
            "as notebook 02 makes them.\n\n"
            + wide.round(0).astype(int).map("{:,}".format).to_markdown() + "\n\n"
            "Spearman's rank correlation of speed with position: +1 when each run was faster than the one before "
            "(the order decides), -1 when each was slower.\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:  # docs/cpu/run_order.md again from docs/cpu/run_order.csv
        import pandas as pd

        first = (OUT / "run_order.md").read_text().split("`python scripts/cpu_run_order.py` on ")[1]
        device, date = first.split(" (the machine")[0].rsplit(", ", 1)
        (OUT / "run_order.md").write_text(report(pd.read_csv(OUT / "run_order.csv"), device, date))
        sys.exit(0)
    if sys.argv[1:2] == ["--one"]:
        order, warm, runs = json.loads(sys.argv[2])
        print(json.dumps(one(order, warm, runs)))
        sys.exit(0)
    sys.exit(main())
