"""The measurement protocol's repeat table (docs/measurement.md): each configuration run `--repeats` times, each
repeat a fresh `workshop run` process, one process at a time on the machine, in rounds (every configuration once,
then again) so that a drift of the machine spreads over all of them; then each configuration's band, the spread
of its steady tokens/s over its repeats, written as a table between markers in OUT/README.md.

    python scripts/repeats.py OUT --runs stage2:40 stage3:40 stage3:40:--max-tokens-per-micro-batch,49152 \
        --repeats 3 -- --random-weights
    python scripts/repeats.py OUT --check      # the table matches OUT/repeats.csv (CI)

A configuration's own arguments follow its steps, comma-separated; those after `--` go to every `workshop run`
(model, precision, ...). A repeat whose results.json exists is kept, so an interrupted measurement resumes, and
more repeats add to the earlier ones; the table counts every finished repeat in OUT. Band: the largest relative difference between two
repeats, (max - min) / mean(max, min), the definition `workshop_lessons.band` uses for the references.
"""

import argparse
import csv
import io
import json
import statistics
import subprocess
import sys
from pathlib import Path

from generated import write_or_check

BEGIN, END = "<!-- repeats -->", "<!-- /repeats -->"
COLUMNS = ["configuration", "repeat", "steady_steps", "steady_train_tokens_per_second", "gpu_peak_mib", "device"]


def run_all(out: Path, runs: list[str], repeats: int, extra: list[str]) -> None:
    """Run every configuration of `runs` (EXPERIMENT:STEPS[:ARG,ARG...]) `repeats` times, in rounds; a repeat whose
    results.json exists is kept."""
    for r in range(1, repeats + 1):
        for spec in runs:
            experiment, steps, *args = spec.split(":")
            folder = out / f"{spec.replace(':', '_').replace(',', '_').replace('--', '')}-r{r}"
            if not (folder / "results.json").exists():
                cmd = [sys.executable, "-m", "workshop_lib.cli", "run", experiment, "--max-steps", steps]
                cmd += [*(args[0].split(",") if args else []), "--save-strategy", "no", "--output-dir", str(folder)]
                print(f"[round {r}/{repeats}] {' '.join(cmd[2:])} {' '.join(extra)}", flush=True)
                subprocess.run([*cmd, *extra], check=True)
                (folder / "configuration.txt").write_text(spec + "\n")


def collect(out: Path) -> list[dict]:
    """One row per finished repeat in `out` (every folder holding results.json and configuration.txt)."""
    rows = []
    for folder in sorted(out.glob("*-r*/configuration.txt")):
        res = json.loads((folder.parent / "results.json").read_text())
        spec, repeat = folder.read_text().strip(), int(folder.parent.name.rsplit("-r", 1)[1])
        rows.append({"configuration": spec, "repeat": repeat} | {c: res[c] for c in COLUMNS[2:]})
    return rows


def band(values: list[float]) -> float:
    """(max - min) / mean(max, min): the largest relative difference between two of `values`, a fraction."""
    return (max(values) - min(values)) / ((max(values) + min(values)) / 2)


def table(rows: list[dict], baseline: str | None = None) -> str:
    """The markdown table: per configuration its repeats' steady tokens/s, their median and band, and with
    `baseline` (a configuration) each median over the baseline's."""
    groups: dict[str, list[float]] = {}
    for row in sorted(rows, key=lambda row: int(row["repeat"])):
        groups.setdefault(row["configuration"], []).append(float(row["steady_train_tokens_per_second"]))
    lines = [
        f"{rows[0]['device']}; each repeat a fresh process, one at a time, in rounds.",
        "",
        "| configuration (experiment:optimizer steps[:arguments]) | repeats | steady tokens/s, each repeat "
        f"| median | band |{f' median / {baseline} |' if baseline else ''}",
        f"| --- | --- | --- | --- | --- |{' --- |' if baseline else ''}",
    ]
    for spec, values in groups.items():
        each = ", ".join(f"{v:,.0f}" for v in values)
        median = statistics.median(values)
        ratio = f" {median / statistics.median(groups[baseline]):.2f}x |" if baseline else ""
        spread = f"±{band(values):.1%}" if len(values) > 1 else "none: one run"
        lines.append(f"| {spec} | {len(values)} | {each} | {median:,.0f} | {spread} |{ratio}")
    return "\n".join(lines) + "\n"


def with_table(readme: str, text: str) -> str:
    head, rest = readme.split(BEGIN)
    return f"{head}{BEGIN}\n{text}{END}{rest.split(END)[1]}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the folder of the runs, repeats.csv and README.md (with the markers)")
    p.add_argument("--runs", nargs="*", default=[], help="EXPERIMENT:OPTIMIZER_STEPS, each a configuration")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per configuration")
    p.add_argument("--baseline", help="a configuration: each median is also given over its median")
    p.add_argument("--check", action="store_true", help="write nothing; fail if README.md's table is stale")
    a = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    csv_path, readme = a.out / "repeats.csv", a.out / "README.md"
    run_all(a.out, a.runs, a.repeats, extra)
    rows = collect(a.out) or list(csv.DictReader(csv_path.open()))  # the runs, or the table of runs not kept
    text = io.StringIO()
    csv.DictWriter(text, COLUMNS, lineterminator="\n").writeheader()
    csv.DictWriter(text, COLUMNS, lineterminator="\n").writerows(rows)
    if not readme.exists():
        readme.write_text(f"# Repeats\n\n{BEGIN}\n{END}\n")
    return write_or_check(
        {csv_path: text.getvalue(), readme: with_table(readme.read_text(), table(rows, a.baseline))},
        a.out,
        a.check,
        f"python scripts/repeats.py {a.out}{f' --baseline {a.baseline}' if a.baseline else ''}",
    )


if __name__ == "__main__":
    sys.exit(main())
