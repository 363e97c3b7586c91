"""The lessons state how DeepSpeed works and cite, in their docstrings, the function that does it as
`module:qualname` (workshop_lessons/zero_stages.py and multi_gpu.py). Each citation is data: parsed out of the
docstrings and resolved in the installed DeepSpeed, so that a release which renames or removes a cited function
fails here instead of leaving the lesson's statement unchecked."""

import ast
import importlib
import re
from pathlib import Path

import pytest

CITATION = re.compile(r"`(deepspeed(?:\.\w+)+):(\w+(?:\.\w+)*)`")
LESSONS = Path(__file__).resolve().parent.parent / "workshop_lessons"


def citations() -> list[tuple[str, str, str]]:
    """(file, module, qualname) of every `deepspeed...:name` in a docstring (module, class, function) of the
    lessons."""
    found = []
    for f in sorted(LESSONS.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                found += [(f.name, m, q) for m, q in CITATION.findall(ast.get_docstring(node) or "")]
    return found


def resolve(module: str, qualname: str):
    """The object `qualname` (dotted: a class's method) names in `module`. Raises ImportError or AttributeError."""
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_lessons_cite_the_functions_they_describe():
    """zero_stages and multi_gpu state DeepSpeed's mechanisms; each cites its functions (and the parser finds
    them: a citation it cannot parse would not be checked)."""
    cited = citations()
    assert {f for f, _, _ in cited} >= {"zero_stages.py", "multi_gpu.py"}
    names = {q for _, _, q in cited}
    assert {"_no_gather_coalesced", "DeepSpeedZeroOptimizer_Stage3._post_step", "all_gather_dp_groups"} <= names
    assert "DeepSpeedZeroOptimizer.average_tensor" in names
    with pytest.raises(AttributeError):  # a function the release lacks fails the check below
        resolve("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3.no_such_method")


@pytest.mark.parametrize("where,module,qualname", citations())
def test_each_cited_function_is_in_the_installed_deepspeed(where, module, qualname):
    import deepspeed  # here: importing it picks the accelerator, which conftest settles first

    assert deepspeed.__version__.startswith("0.19.8"), "the citations were read in DeepSpeed 0.19.8: read them again"
    assert callable(resolve(module, qualname)), f"{where}: {module}:{qualname} is not a function or class"
