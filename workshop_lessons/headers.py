"""The line at the top of every notebook (`header`): its reading time and its run time on each machine it was timed
on; and the prose counts the README's timetable uses too (`prose_paragraphs`, `reading_minutes`)."""

import json
import math
from pathlib import Path

from .registry import REFERENCE

WORDS_PER_MINUTE = 200  # reading speed of technical prose, a common rule of thumb


def markdown_cells(path: Path) -> list[tuple[str, list[str]]]:
    """The markdown cells of a py:percent notebook: (its `# %% [markdown]` line, its lines without the leading '# ')."""
    out, lines = [], None
    for line in path.read_text().splitlines():
        if line.startswith("# %%"):
            lines = [] if "[markdown]" in line else None
            if lines is not None:
                out.append((line, lines))
        elif lines is not None:
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return out


def prose_paragraphs(path: Path) -> list[list[str]]:
    """The words of each paragraph (ending at a blank line) of the markdown a learner reads: the notebook's markdown
    cells but those tagged "solution". What the headers' and the README timetable's reading times count."""
    paras = []
    for head, lines in markdown_cells(path):
        if '"solution"' in head:
            continue
        words: list[str] = []
        for line in [*lines, ""]:
            if line.strip():
                words += line.split()
            elif words:
                paras.append(words)
                words = []
    return paras


def reading_minutes(words: int) -> int:
    """Minutes to read `words` of prose at `WORDS_PER_MINUTE`, rounded up."""
    return math.ceil(words / WORDS_PER_MINUTE)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def header(notebook: str) -> str:
    """The line at the top of every notebook: reading time (its prose, `prose_paragraphs`, at
    `WORDS_PER_MINUTE`) and run time on each machine it was timed on (workshop_lessons/reference/notebook_times.json, written by
    scripts/time_notebooks.py), with the DeepSpeed ops it compiled there (once per machine), as Markdown."""
    # the notebook beside the kernel (course/ or solutions/, its working folder), else the checkout's solution
    src = next(
        (
            p
            for p in (Path.cwd() / f"{notebook}.py", REFERENCE.parents[1] / "solutions" / f"{notebook}.py")
            if p.is_file()
        ),
        None,
    )
    words = sum(map(len, prose_paragraphs(src))) if src else 0
    parts = [f"**Reading:** about {reading_minutes(words)} min ({words:,} words of prose)."]
    times = REFERENCE / "notebook_times.json"
    runs = json.loads(times.read_text()) if times.exists() else {}
    timed = [
        f"{_duration(t['seconds'])} on {device} ({t['model']}, {t['date']}"
        + (f"; it compiled DeepSpeed's {', '.join(t['ops_built'])}, once per machine" if t.get("ops_built") else "")
        + ")"
        for device, nbs in sorted(runs.items())
        if (t := nbs.get(notebook)) and t["returncode"] == 0
    ]
    parts.append(
        "**Running:** "
        + ("; ".join(timed) if timed else "not timed yet")
        + " (`python scripts/time_notebooks.py` times it on yours)."
    )
    return " ".join(parts)
