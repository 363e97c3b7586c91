"""CI's time budget, for every test and notebook under this folder (tests/, lab/tests/, course/, solutions/):
with CI_TEST_DEADLINE set (seconds since the epoch; .ci/run sets it), an item that would start after it is
skipped with that reason, so that CI ends within its time however slow its machine is, and says what it did
not run. Unset (a learner's or developer's run), nothing changes."""

import os
import time

import pytest

TIME_SKIP = "not run: CI's time budget was spent (.ci/run)"


def pytest_runtest_setup(item):
    deadline = os.environ.get("CI_TEST_DEADLINE")
    if deadline and time.time() > float(deadline):
        pytest.skip(TIME_SKIP)
