"""Generate the learner notebooks in course/ from solutions/: the same notebook without the cells tagged
"solution" (the answers). Every other cell stays, the ones that show the learner's own figures beside the
reference included: the learner reads their data and writes the interpretation. CI checks that course/ is up to date (`python scripts/make_course.py --check`).

    python scripts/make_course.py            # write course/*.py
    python scripts/make_course.py --check    # exit 1 if course/ differs from what would be written
    python scripts/make_course.py --diverging   # the learner notebooks that run otherwise than their solution

A learner notebook runs as its solution does, cell for cell, unless a later cell reads a name an answer binds or
changes, other than through a lesson that takes a blank answer and says so (`BLANK_AWARE`: 02's MY_OVERRIDE, None
in course/, reaches only `run_own_key`): only such notebooks run otherwise, so scripts/test.sh executes them beside
every solution (none now); the others' cells run, with the same outputs, inside their solution.
"""

import ast
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
    nb.metadata.setdefault("jupytext", {})["notebook_metadata_filter"] = "kernelspec,language_info,-all"  # pyproject's
    return jupytext.writes(nb, fmt="py:percent")


def parse(source: str) -> ast.Module:
    """A code cell's syntax tree, without IPython's %magics and !commands."""
    return ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))


def bound(source: str) -> set[str]:
    """Names a cell binds or changes: assigned, imported, defined, or an object it assigns into or calls a method
    of (`d["k"] = v`, `runs.append(x)`)."""
    names = set()
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif (
            isinstance(node, (ast.Subscript, ast.Attribute))
            and isinstance(node.ctx, ast.Store)
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute))
        ):
            base = node.func if isinstance(node, ast.Call) else node
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
    return names


# Lesson functions that take a learner's blank answer and say so, by the argument that takes it (tested blank in
# tests/test_lessons_zero_stages.py): read there, or as `ANSWER or "(none written)"`, a blank changes nothing else
BLANK_AWARE = {"beside_prediction": 0, "run_own_key": 2}


def reads(source: str) -> set[str]:
    """Names a cell reads without binding them, leaving out a name it reads only as the argument a `BLANK_AWARE`
    function takes a blank answer by, or as the left side of an `or`."""
    loaded, stored = set(), set()

    def visit(node):
        name = getattr(node, "func", None) and getattr(node.func, "attr", getattr(node.func, "id", None))
        if isinstance(node, ast.Call) and name in BLANK_AWARE and len(node.args) > BLANK_AWARE[name]:
            return [
                visit(n) for i, n in enumerate([node.func, *node.args, *node.keywords]) if i != BLANK_AWARE[name] + 1
            ]
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and isinstance(node.values[0], ast.Name):
            return [visit(v) for v in node.values[1:]]
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(parse(source))
    return loaded - stored


def diverges(solution: Path) -> bool:
    """Whether the learner version of `solution` runs otherwise than it: a code cell after an answer (a cell tagged
    "solution") reads (`reads`) a name that answer binds or changes (`bound`), other than a module the learner's
    cells import (calling into it changes nothing)."""
    answers, imported = set(), set()
    for cell in jupytext.read(solution).cells:
        if cell.cell_type != "code":
            continue
        if "solution" in cell.metadata.get("tags", []):
            answers |= bound(cell.source)
            continue
        imported |= {
            (a.asname or a.name).split(".")[0]
            for n in ast.walk(parse(cell.source))
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        }
        if (answers - imported) & reads(cell.source):
            return True
    return False


def main(check: bool) -> int:
    files = {ROOT / "course" / sol.name: learner_text(sol) for sol in sorted((ROOT / "solutions").glob("[0-9]*.py"))}
    return write_or_check(files, ROOT, check, "python scripts/make_course.py")


if __name__ == "__main__":
    if "--diverging" in sys.argv:
        print(
            " ".join(
                f"course/{sol.stem}.ipynb" for sol in sorted((ROOT / "solutions").glob("[0-9]*.py")) if diverges(sol)
            )
        )
        sys.exit(0)
    sys.exit(main("--check" in sys.argv))
