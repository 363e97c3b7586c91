"""`teardown`: a notebook kernel runs several experiments, each as in a fresh process. The rank variables a run
sets go when it ends (fast, no DeepSpeed); a real ZeRO-3 run then a stage2 run in one process (slow: DeepSpeed
on the tiny model, minutes on 2 cores)."""

import os
import subprocess
import sys

import pytest

from conftest import HANG_S
from workshop_lib import env, teardown


def test_a_world_of_one_leaves_no_rank_variables():
    with teardown.restored_world():
        env.ensure_distributed_env()
        assert os.environ["RANK"] == "0" and os.environ["MASTER_PORT"]
    assert not any(v in os.environ for v in teardown.DIST_VARS)


def test_a_launchers_rank_variables_stay(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with teardown.restored_world():
        os.environ["RANK"] = "0"
        os.environ["MASTER_PORT"] = "29500"
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ.get("MASTER_PORT")) == ("1", "2", None)
    assert "RANK" not in teardown.without_world() and teardown.without_world({"A": "1", "RANK": "0"}) == {"A": "1"}


CHECK = """
def leftovers():
    gc.collect()
    alive = [type(o).__name__ for o in gc.get_objects()
             if isinstance(o, (DeepSpeedZeroOptimizer_Stage3, DeepSpeedEngine, PreTrainedModel))]
    return {"alive": alive, "env": sorted(v for v in DIST_VARS + ("ACCELERATE_USE_DEEPSPEED",) if v in os.environ),
            "fwd_module_stack": len(parameter_offload.FWD_MODULE_STACK), "accelerator_state": bool(
                AcceleratorState._shared_state), "hf_deepspeed_config": is_deepspeed_zero3_enabled()}
"""


@pytest.mark.slow  # two real DeepSpeed runs of the tiny model in one process: minutes on 2 cores
def test_a_zero3_run_then_a_stage2_run_in_one_process(tmp_path):
    """After each run no model, engine or ZeRO-3 optimizer of it stays reachable (DeepSpeed's ZeRO-3 keeps the
    model in FWD_MODULE_STACK and an lru_cache; on the H100 that left the fp32 master weights and Adam moments
    allocated for every later run), no rank variable or DeepSpeed flag is left in os.environ, accelerate's and
    transformers' DeepSpeed state is reset, and the next run trains. In a process of its own, as a kernel."""
    script = f"""
import gc, json, os
from accelerate.state import AcceleratorState
from deepspeed.runtime.engine import DeepSpeedEngine
from deepspeed.runtime.zero import parameter_offload
from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
from transformers import PreTrainedModel
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from workshop_lib.config import RunConfig
from workshop_lib.teardown import DIST_VARS
from workshop_lib.train import run_experiment
{CHECK}
out = []
for experiment in ("stage3", "stage2"):
    r = run_experiment(RunConfig(experiment, tiny=True, output_dir={str(tmp_path)!r} + "/" + experiment,
                                 save_strategy="no", max_steps=2))
    out.append({{"experiment": experiment, "steps": r["global_steps"], "loss": r["train_loss"]}} | leftovers())
    del r
print("RESULT", json.dumps(out))
"""
    clean = {"alive": [], "env": [], "fwd_module_stack": 0, "accelerator_state": False, "hf_deepspeed_config": False}
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 0, p.stderr[-3000:]
    import json

    runs = json.loads(p.stdout.split("RESULT", 1)[1])
    for run in runs:
        assert run["steps"] == 2 and run["loss"] > 0, run
        assert {k: run[k] for k in clean} == clean, run
