"""ZenFlow through the workshop's Trainer path keeps its own update schedule (`workshop_lib.zenflow`)."""

import pandas as pd
import pytest
from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

from conftest import skip_unless_runnable, workshop
from workshop_lib import zenflow

UPDATE_INTERVAL = 2
SETTINGS = {"topk_ratio": 0.5, "select_strategy": '"step"', "select_interval": UPDATE_INTERVAL,
            "update_interval": UPDATE_INTERVAL, "full_warm_up_rounds": 0, "overlap_step": "false"}


@pytest.mark.slow
def test_zenflow_updates_on_the_cpu_every_update_interval_steps_and_learns(tmp_path):
    """A tiny stage2_offload run with ZenFlow, real DeepSpeed on the CPU: the global gradient norm, computed at
    ZenFlow's CPU updates only, changes every `update_interval` steps (accelerate's own wrapper made every step
    an update, each with a new norm); the loss falls. overlap_step stays off: its CPU-update process is for a
    GPU to overlap with."""
    skip_unless_runnable("stage2_offload")
    out = tmp_path / "run"
    overrides = [f"zero_optimization.zenflow.{k}={v}" for k, v in SETTINGS.items()]
    workshop("run", "stage2_offload", "--tiny", "--max-steps", "8", "--save-strategy", "no", "--save-model", "false",
             "--output-dir", out, "--ds-config", *overrides)
    log = pd.read_csv(out / "train_log.csv").dropna(subset=["loss"]).set_index("step")
    norms = log["grad_norm"].loc[2:].round(6).tolist()  # step 1: no CPU update has ended yet
    assert len(norms) == 7 and all(a == b for a, b in zip(norms[0::UPDATE_INTERVAL], norms[1::UPDATE_INTERVAL]))
    assert len(set(norms)) == 4, norms  # one per CPU update: steps 2-3, 4-5, 6-7, 8
    assert log["loss"].iloc[-3:].mean() < log["loss"].iloc[:3].mean(), log["loss"].tolist()


def test_the_wrapper_is_accelerates_again_after_the_block():
    """own_update_boundaries patches accelerate's DeepSpeedEngineWrapper for the run only."""
    before = DeepSpeedEngineWrapper.backward
    with zenflow.own_update_boundaries():
        assert DeepSpeedEngineWrapper.backward is not before
    assert DeepSpeedEngineWrapper.backward is before
