"""Write the day's timetable into README.md, between `<!-- timetable -->` and `<!-- /timetable -->`: per learner
notebook its reading time (the words of its prose, `workshop_lessons.prose_paragraphs`, and of the text its cells print
or display, "output_words" in workshop_lessons/reference/notebook_times.json, at `WORDS_PER_MINUTE`), its run time
(notebook_times.json, written by scripts/time_notebooks.py: on an H100, on several where the notebook starts ranks on
them, and on a CPU) and its questions (`MINUTES_PER_QUESTION` each), the core track's total beside `CORE_BUDGET_MIN`.
Under it the set-up's time
(workshop_lessons/reference/setup_times.json, written by `WORKSHOP_SETUP_TIMES=FILE bash scripts/setup.sh`). CI checks that the README is up to date (`python scripts/make_timetable.py --check`); change this script or the
notebooks, never the table.

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

from workshop_lessons import WORDS_PER_MINUTE, markdown_cells, prose_paragraphs  # noqa: E402

MINUTES_PER_QUESTION = 3  # an assumption, stated in the table's caption
CORE = ["00_setup", "01_baseline", "02_zero_stages", "03_cpu_offload", "04_multi_gpu"]
OPTIONAL = ["03b_the_fine_tuned_model", "03c_models_that_do_not_fit", "03d_failure_drills", "03e_zero3_or_fsdp2"]
CORE_BUDGET_MIN = 240  # the core track fits a day: at most 4 hours of content
BEGIN, END = "<!-- timetable -->", "<!-- /timetable -->"


def questions(path: Path) -> int:
    """The questions of the markdown cells tagged "exercise": per cell its question marks, or its numbered items
    where more (an item may ask without one), at least 1."""
    return sum(
        max(1, text.count("?"), len(re.findall(r"^\d+\.\s", text, re.M)))
        for text in ("\n".join(lines) for head, lines in markdown_cells(path) if '"exercise"' in head)
    )


def notebook_times(root: Path = ROOT) -> dict:
    """workshop_lessons/reference/notebook_times.json: {device: {notebook: {"seconds", "returncode", ...}}}."""
    return json.loads((root / "workshop_lessons" / "reference" / "notebook_times.json").read_text())


def timed(times: dict, kind: str, several: bool = False) -> tuple[str | None, dict]:
    """The device named like `kind` ("H100", "cpu") in notebook_times.json, of one GPU or (`several`) of several
    ("2 x ..."), and its finished notebooks' entries; (None, {}) where there is none."""
    device = next((d for d in times if kind.lower() in d.lower() and bool(re.match(r"\d+ x ", d)) == several), None)
    return device, {nb: t for nb, t in times.get(device, {}).items() if t["returncode"] == 0}


def rows(root: Path = ROOT) -> list[dict]:
    times = notebook_times(root)
    (_, on_gpu), (gpus, on_gpus), (_, on_cpu) = (
        timed(times, "H100"),
        timed(times, "H100", several=True),
        timed(times, "cpu"),
    )
    out = []
    for nb in CORE + OPTIONAL:
        path = root / "course" / f"{nb}.py"
        # the text a GPU run printed where one recorded it (any GPU), else the CPU run's (the tiny model's)
        gpu_runs = [t for d, t in sorted(times.items()) if "cpu" not in d.lower()]
        printed = next((t[nb] for t in [*gpu_runs, on_cpu] if t.get(nb, {}).get("output_words") is not None), {})
        run = on_gpus.get(nb) or on_gpu.get(nb)  # a notebook timed on several GPUs needs them
        r = {
            "notebook": nb,
            "core": nb in CORE,
            "words": sum(map(len, prose_paragraphs(path))),
            "output": printed.get("output_words"),
            "output_on": "CPU" if printed and printed is on_cpu.get(nb) else "GPU",
            "gpu": math.ceil(run["seconds"] / 60) if run else None,
            "gpu_on": f"{gpus.split(' x ')[0]} GPUs" if nb in on_gpus else "1 GPU",
            "cpu": math.ceil(on_cpu[nb]["seconds"] / 60) if nb in on_cpu else None,
            "questions": questions(path),
        }
        r["reading"] = math.ceil((r["words"] + (r["output"] or 0)) / WORDS_PER_MINUTE)
        r["total"] = r["reading"] + (r["gpu"] or 0) + r["questions"] * MINUTES_PER_QUESTION
        out.append(r)
    return out


def table(root: Path = ROOT) -> str:
    rs = rows(root)
    core = [r for r in rs if r["core"]]
    total = {
        k: sum(r[k] or 0 for r in core) for k in ("words", "output", "reading", "gpu", "cpu", "questions", "total")
    }
    unread = [r["notebook"] for r in core if r["output"] is None]
    if unread:
        raise SystemExit(f"No printed words recorded for {', '.join(unread)}. To fix: python scripts/time_notebooks.py "
                         f"--words-only {' '.join(unread)}")  # fmt: skip
    if total["total"] > CORE_BUDGET_MIN:
        raise SystemExit(f"The core track takes {total['total']} min, over its {CORE_BUDGET_MIN}: shorten it.")
    device = timed(notebook_times(root), "H100")[0]
    cpu = re.sub(r"^cpu\s*", "", timed(notebook_times(root), "cpu")[0]).strip("()")
    lines = [
        f"Minutes, each figure rounded up. Reading: the words of the notebook's markdown and of the text its cells "
        f"print or display (tables, JSON, logs; a figure counts none), at {WORDS_PER_MINUTE} a minute; that text as "
        "`python scripts/time_notebooks.py` recorded it, on a GPU where it did, else on a CPU with the tiny model "
        f"(marked CPU). Run: the whole notebook executed on an {device} (on 2 of them for a notebook that starts "
        f"ranks on several GPUs, marked) and on a CPU ({cpu}), from `workshop_lessons/reference/notebook_times.json`. "
        "Questions: the question marks (or numbered items, where more) of its exercises, assumed to take "
        f"{MINUTES_PER_QUESTION} minutes each. Total: reading, the GPU run and the questions; the core track's must "
        f"stay within {CORE_BUDGET_MIN} minutes. Written by `python scripts/make_timetable.py`.",
        "",
        "| notebook | words of prose | words printed | reading | run, GPU | run, CPU | questions | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    row = "| {} | {:,} | {} | {} | {} | {} | {} ({} min) | {} |"
    number = lambda m, note="", none="not timed": none if m is None else f"{m:,}{note}"  # noqa: E731
    for r in core + [None] + [r for r in rs if not r["core"]]:
        if r is None:  # the core track's sum, between its notebooks and the optional ones
            t = total
            lines.append(
                row.format(
                    "**core track**", t["words"], f"{t['output']:,}", t["reading"], t["gpu"], t["cpu"], t["questions"],
                    t["questions"] * MINUTES_PER_QUESTION, f"**{t['total']}** ({t['total'] / 60:.1f} h)",
                )
            )  # fmt: skip
            continue
        lines.append(
            row.format(
                f"`{r['notebook']}`" + ("" if r["core"] else " (optional)"),
                r["words"],
                number(r["output"], " (CPU)" if r["output_on"] == "CPU" else "", "not recorded"),
                r["reading"],
                number(r["gpu"], "" if r["gpu_on"] == "1 GPU" else f" ({r['gpu_on']})"),
                number(r["cpu"]),
                r["questions"],
                r["questions"] * MINUTES_PER_QUESTION,
                r["total"],
            )
        )
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
