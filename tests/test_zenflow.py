"""ZenFlow through the workshop's Trainer path keeps its own update schedule (`workshop_lib.zenflow`)."""

import json

import pandas as pd
import pytest
from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

from conftest import skip_unless_runnable, workshop
from workshop_lib import zenflow
from workshop_lib.ds_config import ZENFLOW, zenflow_overlap_step


@pytest.mark.slow
def test_zenflow_updates_on_the_cpu_every_update_interval_steps_and_learns(tmp_path):
    """`workshop run stage2_zenflow --tiny`, real DeepSpeed on the CPU, 12 steps: the global gradient norm, computed
    at ZenFlow's CPU updates only, changes every `update_interval` steps (accelerate's own wrapper made every step an
    update, each with a new norm); the loss falls. overlap_step is off without CUDA (ds_config.zenflow_overlap_step):
    its CPU-update process is for a GPU to overlap with."""
    skip_unless_runnable("stage2_zenflow")
    out = tmp_path / "run"
    workshop(
        "run",
        "stage2_zenflow",
        "--tiny",
        "--max-steps",
        "12",
        "--save-strategy",
        "no",
        "--save-model",
        "false",
        "--output-dir",
        out,
    )
    zf = json.loads((out / "ds_config.json").read_text())["zero_optimization"]["zenflow"]
    k = zf["update_interval"]
    assert zf == ZENFLOW | {"overlap_step": zenflow_overlap_step()} and k == 4
    log = pd.read_csv(out / "train_log.csv").dropna(subset=["loss"]).set_index("step")
    norms = log["grad_norm"].loc[k:].round(6).tolist()  # steps 1-3: no CPU update has ended yet
    assert log["grad_norm"].loc[: k - 1].isna().all() and len(norms) == 12 - k + 1
    cycles = [norms[i : i + k] for i in range(0, len(norms), k)]  # steps 4-7, 8-11, 12
    assert all(len(set(c)) == 1 for c in cycles) and len({c[0] for c in cycles}) == 3, norms
    assert log["loss"].iloc[-3:].mean() < log["loss"].iloc[:3].mean(), log["loss"].tolist()


def test_the_wrapper_is_accelerates_again_after_the_block():
    """own_update_boundaries patches accelerate's DeepSpeedEngineWrapper for the run only."""
    before = DeepSpeedEngineWrapper.backward
    with zenflow.own_update_boundaries():
        assert DeepSpeedEngineWrapper.backward is not before
    assert DeepSpeedEngineWrapper.backward is before
