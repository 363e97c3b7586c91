"""The library's layers point one way: a module imports only modules of its own layer or below, at the top
or inside a function alike (issue 25). A new module is placed in `LAYERS` by whoever adds it. The house has three
parts: the engine (workshop_lib), the course's lessons (workshop_lessons, over the engine) and the lab (lab/, over
both, not installed); nothing imports a part above its own."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "workshop_lib"
# low to high: errors; the machine; the concepts (each importing its peers, without a circle); one run; the
# command line
LAYERS = [
    {"errors", "units", "gpus", "variables", "hub"},
    {"env"},
    {
        "config",
        "data",
        "model",
        "ds_config",
        "memory",
        "metrics",
        "rundir",
        "checkpoint",
        "fit",
        "evaluation",
        "results",
        "comms",
        "launch",
        "callbacks",
        "teardown",
        "preflight",
    },
    {"train", "record"},
    {"cli"},
]
LAYER = {m: i for i, layer in enumerate(LAYERS) for m in layer}


def _module(path: Path) -> str:
    """workshop_lib/train.py -> "train": the top-level module a file belongs to."""
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def imports(path: Path) -> set[str]:
    """The workshop_lib top-level modules `path` imports, anywhere in the file."""
    found = set()
    depth = len(path.relative_to(ROOT).parts) - 1  # 0 for workshop_lib/x.py
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level - 1 < depth:  # inside its own package (lessons' `from . import band`)
                continue
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            found.update(names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workshop_lib."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "workshop_lib":
            found.update(a.name for a in node.names)
    return found


def test_every_module_has_a_layer():
    modules = {_module(p) for p in ROOT.rglob("*.py")} - {"__init__"}
    assert modules == set(LAYER), f"place these in LAYERS: {modules - set(LAYER)}; gone: {set(LAYER) - modules}"


def test_no_module_imports_one_of_a_higher_layer():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        me = _module(path)
        if me == "__init__":
            continue
        for other in imports(path) - {me}:
            if LAYER[other] > LAYER[me]:
                wrong.append(
                    f"{path.relative_to(ROOT)} ({me}, layer {LAYER[me]}) imports {other} (layer {LAYER[other]})"
                )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("part, above", [("workshop_lib", ("workshop_lessons", "lab")), ("workshop_lessons", ("lab",))])
def test_no_part_imports_one_above_it(part, above):
    """The engine imports neither the lessons nor the lab; the lessons import no lab."""
    wrong = [
        f"{p.relative_to(ROOT.parent)}:{node.lineno}"
        for p in sorted((ROOT.parent / part).rglob("*.py"))
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(
            n.split(".")[0] in above
            for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])
        )
    ]
    assert not wrong, wrong


def test_no_import_circle_anywhere():
    """No chain of imports, at the top or inside a function, leads from a module back to itself: among the
    concept modules (which `LAYERS` lets import each other) too. A circle found is printed as its path."""
    graph = {}
    for path in ROOT.rglob("*.py"):
        if _module(path) != "__init__":
            graph.setdefault(_module(path), set()).update(imports(path) - {_module(path), "__init__"})

    def circle_from(start, node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path + [nxt]
            if nxt not in path and (found := circle_from(start, nxt, path + [nxt])):
                return found
        return None

    circles = [" -> ".join(c) for m in sorted(graph) if (c := circle_from(m, m, [m]))]
    assert not circles, "\n".join(circles)


def test_mib_is_defined_once():
    """One home for the byte unit: `units.MiB`; no module divides by a literal 2**20 of its own."""
    import re

    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(ROOT.rglob("*.py"))
        if p.name != "units.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"MiB\s*=\s*2\s*\*\*\s*20|[/*]\s*2\s*\*\*\s*20\b", line.split("#")[0])
    ]
    assert not found, found


def test_results_titles_are_written_once():
    """One home for the titles of results.json's figures: `results.COLUMNS`. No other module or script writes
    one as a string of its own (a name that is its own key, "model", is not a title); each takes it from
    `results.title`, so a title changed there changes every table. Units are in the titles where they have one."""
    from workshop_lib.results import COLUMNS

    words = {"parameters", "micro-batch"}  # plain words too: a model's parameter count, fit's micro-batch slider
    titles = {c.title for k, c in COLUMNS.items() if c.title != k} - words
    found = [
        f"{p.relative_to(ROOT.parent)}:{node.lineno}: {node.value!r}"
        for p in sorted([*ROOT.rglob("*.py"), *(ROOT.parent / "scripts").rglob("*.py")])
        if p.name != "results.py"
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Constant) and node.value in titles
    ]
    assert not found, "\n".join(found)
    for key, c in COLUMNS.items():
        assert c.unit in ("", "nats", "fraction") or c.unit in c.title, key
