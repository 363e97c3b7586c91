"""CI's shorter notebooks, for every notebook under this folder (course/, solutions/): with CI_NOTEBOOK_MAX_STEPS set
(.ci/run sets it), each notebook but the one CI keeps at full length (CI_FULL_NOTEBOOK, default 02_zero_stages)
runs that many optimizer steps a run (WORKSHOP_MAX_STEPS in its kernel's environment, `lessons.notebook_run_options`)
instead of `lessons.GPU_MAX_STEPS`: the same cells and paths in less time. Every notebook still runs to its end; a
WORKSHOP_MAX_STEPS already set wins. Unset (a learner's or developer's run), nothing changes."""

import os

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """nbmake's items are not functions (no fixtures): the variable is set around the notebook's run itself."""
    steps, full = os.environ.get("CI_NOTEBOOK_MAX_STEPS"), os.environ.get("CI_FULL_NOTEBOOK", "02_zero_stages")
    path = item.path
    if not (steps and path.suffix == ".ipynb" and path.stem != full and "WORKSHOP_MAX_STEPS" not in os.environ):
        return (yield)
    os.environ["WORKSHOP_MAX_STEPS"] = steps  # nbmake's kernel starts with this process's environment
    try:
        return (yield)
    finally:
        del os.environ["WORKSHOP_MAX_STEPS"]
