"""Generate the learner notebooks in course/ from solutions/: the same notebook without the cells tagged
"solution" (the answers). Every other cell stays, the ones that show the learner's own figures beside the
reference included: the learner reads their data and writes the interpretation. CI checks that course/ is up to date (`python scripts/make_course.py --check`).

    python scripts/make_course.py            # write course/*.py
    python scripts/make_course.py --check    # exit 1 if course/ differs from what would be written
"""

import re
import sys
from pathlib import Path

import jupytext
from generated import write_or_check

ROOT = Path(__file__).resolve().parent.parent
NOTE = "*Learner version: {}the interpretation is yours (the answers are in `solutions/`).*"
BESIDE = "the tables show your own runs beside the GPU reference; "
# a notebook that shows the GPU reference runs (`workshop_lessons.reference`, the H200 scaling or large-model runs)
SHOWS_REFERENCE = re.compile(r"reference runs are shown beside yours|lessons\.(reference|REFERENCE)|REFERENCE_DIR")


def learner_text(solution: Path) -> str:
    nb = jupytext.read(solution)
    nb.cells = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    nb.cells[0].source += "\n\n" + NOTE.format(BESIDE if SHOWS_REFERENCE.search(solution.read_text()) else "")
    nb.metadata.setdefault("jupytext", {})["notebook_metadata_filter"] = "kernelspec,-all"  # pyproject.toml's
    return jupytext.writes(nb, fmt="py:percent")


def main(check: bool) -> int:
    files = {ROOT / "course" / sol.name: learner_text(sol) for sol in sorted((ROOT / "solutions").glob("[0-9]*.py"))}
    return write_or_check(files, ROOT, check, "python scripts/make_course.py")


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
