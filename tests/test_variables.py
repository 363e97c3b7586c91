"""The WORKSHOP_* environment variables: one table (`workshop_lib.variables`), every name the repository uses
in it, read by the library only through `variables.get`, which parses each to its type or stops with the fix."""

import re
from pathlib import Path

import pytest

from workshop_lib import variables
from workshop_lib.errors import WorkshopError

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["workshop_lib", "solutions", "scripts", "slurm", "container", "tests", ".ci"]


def _files():
    for top in SOURCES:
        for p in sorted((ROOT / top).rglob("*")):
            if (
                p.is_file()
                and p.suffix in {".py", ".sh", ".slurm", ""}
                and "__pycache__" not in p.parts
                and p.name != "test_variables.py"
            ):
                yield p


def test_every_variable_the_repository_uses_is_in_the_table_and_every_one_in_the_table_is_used():
    used = {m for p in _files() for m in re.findall(r"\bWORKSHOP_[A-Z][A-Z_]*[A-Z]\b", p.read_text(errors="replace"))}
    assert used - set(variables.VARIABLES) == set(), "add these to workshop_lib/variables.py"
    assert set(variables.VARIABLES) - used == set(), "no file uses these: remove them from the table"


def test_the_library_and_the_notebooks_read_them_only_through_get():
    direct = re.compile(r"(environ(\.get)?\s*[\[(]|getenv\s*\()\s*[\"']WORKSHOP_")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for top in ("workshop_lib", "solutions", "course")
        for p in sorted((ROOT / top).rglob("*.py"))
        if p.name != "variables.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert not found, found


def test_get_parses_each_kind_and_refuses_a_bad_value_with_the_fix(monkeypatch):
    for name, raw, value in [
        ("WORKSHOP_MAX_STEPS", "12", 12),
        ("WORKSHOP_GPU_MEMORY_FRACTION", "0.5", 0.5),
        ("WORKSHOP_RANDOM_WEIGHTS", "1", True),
        ("WORKSHOP_RANDOM_WEIGHTS", "0", False),
        ("WORKSHOP_TINY", "auto", "auto"),
        ("WORKSHOP_CACHE", "/scratch", "/scratch"),
    ]:
        monkeypatch.setenv(name, raw)
        assert variables.get(name) == value
    monkeypatch.setenv("WORKSHOP_MAX_STEPS", "")
    assert variables.get("WORKSHOP_MAX_STEPS", 24) == 24  # empty is unset
    for name, raw, expected in [
        ("WORKSHOP_MAX_STEPS", "ten", "a whole number, 0 or more"),
        ("WORKSHOP_TINY", "yes", "auto or 1 or 0"),
        ("WORKSHOP_RANDOM_WEIGHTS", "true", "1 or 0"),
        ("WORKSHOP_DIST_TIMEOUT_S", "5m", "a whole number, 0 or more"),
        ("WORKSHOP_DIST_TIMEOUT_S", "-5", "a whole number, 0 or more"),  # issue 38
        ("WORKSHOP_OP_LOCK_TIMEOUT_S", "nan", "a finite number, 0 or more"),
        ("WORKSHOP_GPU_MEMORY_FRACTION", "-inf", "a finite number, 0 or more"),
    ]:
        monkeypatch.setenv(name, raw)
        with pytest.raises(WorkshopError, match=rf"(?s){name}='{raw}' is not {expected} \(.*To fix: set {name}"):
            variables.get(name)
    with pytest.raises(WorkshopError, match="WORKSHOP_TINNY is not one of the workshop's environment variables"):
        variables.get("WORKSHOP_TINNY")
