"""Write the day's timetable into README.md, between `<!-- timetable -->` and `<!-- /timetable -->`: per learner
notebook its reading time (`workshop_lessons.prose_paragraphs` and `reading_minutes`, as its header), its run time on
an H100 and on a CPU (workshop_lessons/reference/notebook_times.json, written by scripts/time_notebooks.py) and its
exercises (`MINUTES_PER_EXERCISE` each), the core track's total beside `CORE_BUDGET_MIN`; under it the set-up's time
(workshop_lessons/reference/setup_times.json, written by `WORKSHOP_SETUP_TIMES=FILE bash scripts/setup.sh`). CI checks
that the README
is up to date (`python scripts/make_timetable.py --check`); change this script or the notebooks, never the table.

    python scripts/make_timetable.py            # write the table into README.md
    python scripts/make_timetable.py --check    # exit 1 if README.md's table differs from what would be written
"""

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # run as a script or loaded by a test
from generated import write_or_check  # noqa: E402

from workshop_lessons import WORDS_PER_MINUTE, markdown_cells, prose_paragraphs, reading_minutes  # noqa: E402

MINUTES_PER_EXERCISE = 5  # an assumption, stated in the table's caption
CORE = ["00_setup", "01_baseline", "02_zero_stages", "03_cpu_offload", "04_multi_gpu"]
OPTIONAL = ["03b_the_fine_tuned_model", "03c_models_that_do_not_fit", "03d_failure_drills", "03e_zero3_or_fsdp2"]
CORE_BUDGET_MIN = 210  # the core track fits a day's 3.5 hours of teaching
BEGIN, END = "<!-- timetable -->", "<!-- /timetable -->"


def exercises(path: Path) -> int:
    """Exercise questions: the numbered items of each markdown cell tagged "exercise", or 1 for a cell without."""
    return sum(
        max(1, len(re.findall(r"^\d+\.\s", "\n".join(lines), re.M)))
        for head, lines in markdown_cells(path)
        if '"exercise"' in head
    )


def run_seconds(times: dict, kind: str) -> tuple[str, dict]:
    """The one-GPU (or CPU) device named like `kind` in notebook_times.json ("H100", or "cpu"), and its seconds
    per notebook; machines of several GPUs ("2 x ...") have a line of their own under the table."""
    device = next(d for d in times if kind.lower() in d.lower() and not re.match(r"\d+ x ", d))
    return device, {nb: t["seconds"] for nb, t in times[device].items() if t["returncode"] == 0}


def notebook_times(root: Path = ROOT) -> dict:
    """workshop_lessons/reference/notebook_times.json: {device: {notebook: {"seconds", "returncode", ...}}}."""
    return json.loads((root / "workshop_lessons" / "reference" / "notebook_times.json").read_text())


def rows(root: Path = ROOT) -> list[dict]:
    times = notebook_times(root)
    (gpu, on_gpu), (cpu, on_cpu) = run_seconds(times, "H100"), run_seconds(times, "cpu")
    out = []
    for nb in CORE + OPTIONAL:
        path = root / "course" / f"{nb}.py"
        words = sum(map(len, prose_paragraphs(path)))
        r = {
            "notebook": nb,
            "core": nb in CORE,
            "words": words,
            "reading": reading_minutes(words),
            "gpu": math.ceil(on_gpu[nb] / 60) if nb in on_gpu else None,
            "cpu": math.ceil(on_cpu[nb] / 60) if nb in on_cpu else None,
            "exercises": exercises(path),
            "gpu_device": gpu,
            "cpu_device": cpu,
        }
        r["total"] = r["reading"] + (r["gpu"] or 0) + r["exercises"] * MINUTES_PER_EXERCISE
        out.append(r)
    return out


def table(root: Path = ROOT) -> str:
    rs = rows(root)
    core = [r for r in rs if r["core"]]
    total = {k: sum(r[k] for r in core) for k in ("words", "reading", "gpu", "cpu", "exercises", "total")}
    if total["total"] > CORE_BUDGET_MIN:
        raise SystemExit(f"The core track takes {total['total']} min, over its {CORE_BUDGET_MIN}: shorten it.")
    minutes = lambda m: "not timed" if m is None else f"{m}"  # noqa: E731
    cpu = re.sub(r"^cpu\s*", "", rs[0]["cpu_device"]).strip("()")
    lines = [
        f"Minutes, each figure rounded up. Reading: the words of the notebook's markdown at {WORDS_PER_MINUTE} a "
        f"minute. Run: the whole notebook executed on an {rs[0]['gpu_device']} and on a CPU ({cpu}), from "
        "`workshop_lessons/reference/notebook_times.json` (`python scripts/time_notebooks.py` measures them). "
        f"Exercises: the questions to answer, assumed to take {MINUTES_PER_EXERCISE} minutes each. Total: reading, "
        f"the H100 run and the exercises; the core track's must stay within {CORE_BUDGET_MIN} minutes. Written by "
        "`python scripts/make_timetable.py`.",
        "",
        "| notebook | words | reading | run, H100 | run, CPU | exercises | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    row = "| {} | {:,} | {} | {} | {} | {} ({} min) | {} |"
    for r in core:
        lines.append(
            row.format(
                f"`{r['notebook']}`",
                r["words"],
                r["reading"],
                minutes(r["gpu"]),
                minutes(r["cpu"]),
                r["exercises"],
                r["exercises"] * MINUTES_PER_EXERCISE,
                r["total"],
            )
        )
    lines.append(
        row.format(
            "**core track**",
            total["words"],
            total["reading"],
            total["gpu"],
            total["cpu"],
            total["exercises"],
            total["exercises"] * MINUTES_PER_EXERCISE,
            f"**{total['total']}** ({total['total'] / 60:.1f} h)",
        )
    )
    for r in rs:
        if not r["core"]:
            lines.append(
                row.format(
                    f"`{r['notebook']}` (optional)",
                    r["words"],
                    r["reading"],
                    minutes(r["gpu"]),
                    minutes(r["cpu"]),
                    r["exercises"],
                    r["exercises"] * MINUTES_PER_EXERCISE,
                    r["total"],
                )
            )
    times = notebook_times(root)
    several = [
        f"`{nb}` {math.ceil(t['seconds'] / 60)} min on {device}"
        for device, nbs in sorted(times.items())
        if re.match(r"\d+ x ", device)
        for nb, t in sorted(nbs.items())
        if t["returncode"] == 0
    ]
    if several:  # a machine of several GPUs, where notebook 04 starts its ranks on them
        lines += ["", f"With several GPUs (run, ranks on each): {'; '.join(several)}."]
    return "\n".join([*lines, "", setup_line(root)])


SETUP_PARTS = {  # scripts/setup.sh's parts, as it names them in setup_times.json
    "venv": "the virtual environment",
    "torch": "torch",
    "workshop": "the workshop and what it needs",
    "CPUAdamBuilder": "DeepSpeed's CPU Adam op",
}


def setup_line(root: Path = ROOT) -> str:
    """Before the first notebook: a fresh `bash scripts/setup.sh`, as workshop_lessons/reference/setup_times.json
    measured it."""
    measured = json.loads((root / "workshop_lessons" / "reference" / "setup_times.json").read_text())
    seconds = measured["seconds"]
    parts = "; ".join(f"{what} {seconds[name]} s" for name, what in SETUP_PARTS.items())
    return (
        f"Set-up, once before the first notebook: {math.ceil(sum(seconds[n] for n in SETUP_PARTS) / 60)} min on a "
        f"{measured['machine']} under a load average of {measured['load_average_15min']} ({parts}), a fresh "
        "`bash scripts/setup.sh` as `workshop_lessons/reference/setup_times.json` measured it "
        "(`WORKSHOP_SETUP_TIMES=FILE bash scripts/setup.sh` in a fresh clone; with a GPU torch's "
        "CUDA build is a download of several GB more). Other DeepSpeed ops compile at the first run that needs them."
    )


def readme_text(root: Path = ROOT) -> str:
    readme = (root / "README.md").read_text()
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise SystemExit(f"README.md needs one {BEGIN} and one {END} line, the table's place.")
    head, rest = readme.split(BEGIN)
    return f"{head}{BEGIN}\n{table(root)}\n{END}{rest.split(END, 1)[1]}"


def main(check: bool) -> int:
    return write_or_check({ROOT / "README.md": readme_text(ROOT)}, ROOT, check, "python scripts/make_timetable.py")


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
