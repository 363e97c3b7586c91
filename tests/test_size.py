"""Size is counted in statements (Python's AST), which no formatting can move: the engine and the course's
lessons each stay under a budget, paid for by removing scope, never by joining lines."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"workshop_lib": 3400, "workshop_lessons": 1700}


def statements(package: Path) -> int:
    """The number of statements (ast.stmt nodes, nested ones included) in every .py file under `package`."""
    return sum(
        isinstance(node, ast.stmt) for path in package.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
    )


def test_statements_count_code_not_lines():
    joined = ast.parse("a = 1; b = 2\nif a:\n    b = 3\n")
    assert sum(isinstance(n, ast.stmt) for n in ast.walk(joined)) == 4


@pytest.mark.parametrize("package", BUDGETS)
def test_each_package_stays_within_its_statement_budget(package):
    count = statements(ROOT / package)
    assert count <= BUDGETS[package], f"{package} holds {count} statements, over its budget of {BUDGETS[package]}"
