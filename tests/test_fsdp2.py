"""The fsdp2 experiment: PyTorch FSDP2 through the HF Trainer's own integration (accelerate's FSDP plugin), on the
CPU over gloo, in one process (the session's tiny run, beside ZeRO-3's) and on 2 ranks; its refusals."""

import json
import time

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, TrainingArguments

from conftest import HANG_S, Workshop, workshop
from workshop_lib import checkpoint, launch, rundir
from workshop_lib.config import RunConfig, resolve
from workshop_lib.ds_config import EXPERIMENTS, build_fsdp_config
from workshop_lib.errors import WorkshopError

GPU = torch.cuda.is_available()


def test_the_trainer_reads_the_fsdp_config_as_fsdp2_over_each_decoder_layer(tmp_path):
    """What transformers hands accelerate's FSDP plugin from the config the run writes to fsdp_config.json."""
    exp = EXPERIMENTS["fsdp2"]
    assert exp.fsdp and not exp.deepspeed and exp.zero_stage is None
    assert exp.fit_setup == EXPERIMENTS["stage3"].fit_setup  # its states sharded as ZeRO-3 shards them
    for checkpointing in (False, True):
        cfg = build_fsdp_config(exp, ["Qwen3DecoderLayer"], checkpointing)
        args = TrainingArguments(tmp_path, fsdp=True, fsdp_config=cfg, use_cpu=True, report_to="none")
        plugin = args.fsdp_plugin_args
        assert (plugin["fsdp_version"], plugin["auto_wrap_policy"], plugin["transformer_cls_names_to_wrap"]) == (
            2,
            "TRANSFORMER_BASED_WRAP",
            "Qwen3DecoderLayer",
        )
        assert plugin["reshard_after_forward"] is True and plugin["state_dict_type"] == "FULL_STATE_DICT"
        assert plugin["activation_checkpointing"] is checkpointing and "cpu_offload" not in plugin
    with pytest.raises(WorkshopError, match="To fix: pick fsdp2"):
        build_fsdp_config(EXPERIMENTS["stage3"], ["Qwen3DecoderLayer"])


def test_deepspeed_keys_are_refused_before_anything_is_written_and_the_comms_logger_is_not(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(WorkshopError, match="--ds-config sets DeepSpeed keys") as e:
        resolve(RunConfig("fsdp2", tiny=True, output_dir=str(out), ds_config=["zero_optimization.overlap_comm=false"]))
    assert "To fix: " in str(e.value) and not out.exists()
    assert resolve(RunConfig("fsdp2", tiny=True, output_dir=str(out), comms_logger=True)).comms_logger  # torch's
    with pytest.raises(WorkshopError, match="--comms-logger logs the collectives of ZeRO and FSDP2"):
        resolve(RunConfig("baseline", tiny=True, output_dir=str(out), comms_logger=True))
    assert not out.exists()


@pytest.mark.slow
def test_an_fsdp2_run_writes_what_a_stage3_run_writes_and_trains_the_same_model(tiny_runs):
    d, ref = tiny_runs / "fsdp2", tiny_runs / "stage3"
    r, r3 = (json.loads((x / "results.json").read_text()) for x in (d, ref))
    assert set(r) == set(r3) and (r["experiment"], r["zero_stage"], r["world_size"]) == ("fsdp2", None, 1)
    # the same model states estimate as ZeRO-3's (its sharding of parameters, gradients and Adam states)
    assert r["estimated_model_states_cpu_mib"] == r3["estimated_model_states_cpu_mib"]
    assert list(pd.read_csv(d / "train_log.csv")) == list(pd.read_csv(ref / "train_log.csv"))
    assert {f.name for f in (d / "model").iterdir()} == {f.name for f in (ref / "model").iterdir()}
    assert not (d / "ds_config.json").exists()
    fsdp = json.loads((d / "fsdp_config.json").read_text())
    assert fsdp["version"] == 2 and fsdp["transformer_layer_cls_to_wrap"] == ["Qwen3DecoderLayer"]
    # same data, order and fp32 Adam maths as ZeRO-3 on the CPU: the same losses (a GPU's bf16 rounds otherwise)
    tol = 0.05 if GPU else 0.002
    assert abs(r["train_loss"] - r3["train_loss"]) < tol and abs(r["eval_loss"][-1] - r3["eval_loss"][-1]) < tol
    net = AutoModelForCausalLM.from_pretrained(d / "model")
    assert sum(p.numel() for p in net.parameters()) == r["num_params"]
    # its checkpoints hold whole states (FULL_STATE_DICT): nothing for `workshop export` to join, as the run said
    last = checkpoint.find_checkpoints(d)[0][-1]
    assert {"model.safetensors", "pytorch_model_fsdp.bin", "optimizer.bin"} <= {f.name for f in last.iterdir()}
    p = workshop("export", d, d.parent / "fsdp2-exported", check=False)
    assert p.returncode != 0 and "its model.safetensors is the whole model" in p.stderr
    assert not (d.parent / "fsdp2-exported").exists()


@pytest.mark.slow
def test_an_fsdp2_run_stopped_after_a_checkpoint_resumes_to_the_losses_of_an_uninterrupted_one(tiny_runs, tmp_path):
    out = tmp_path / "run"
    args = ["run", "fsdp2", "--tiny", "--save-strategy", "steps", "--save-steps", "1", "--output-dir", out]
    proc = Workshop(*args)
    deadline = time.time() + HANG_S
    while proc.poll() is None and checkpoint.step_of(out / checkpoint.CHECKPOINTS / "checkpoint-2") is None:
        assert time.time() < deadline
        time.sleep(0.05)
    (out / rundir.STOP_FILE).touch()  # what a batch job does on SLURM's warning: stop at the next step boundary
    said = proc.communicate(timeout=HANG_S)[0]
    assert proc.returncode == 75 and "PyTorch FSDP2 through the HF Trainer" in said and "--resume" in said, said
    workshop(*args, "--resume")
    log, ref = (pd.read_csv(x / "train_log.csv") for x in (out, tiny_runs / "fsdp2"))
    assert list(log["step"]) == list(ref["step"])
    tol = 1e-3 if GPU else 1e-6  # CPU fp32: the same data order, RNG and Adam states
    assert (log[["loss", "eval_loss"]].fillna(0) - ref[["loss", "eval_loss"]].fillna(0)).abs().max().max() <= tol


@pytest.mark.slow
def test_fsdp2_on_two_gloo_ranks_trains_as_one_process_with_the_same_global_batch(tmp_path):
    """2 ranks of 1 micro-batch each, and 1 process accumulating 2: the same 32 questions per step, the same loss."""
    env = {"CUDA_VISIBLE_DEVICES": ""}
    two = launch.run_local("fsdp2", 2, tmp_path / "two", "--tiny", "--max-steps", "2", env=env)
    workshop(
        *("run", "fsdp2", "--tiny", "--max-steps", "2", "--gradient-accumulation-steps", "2"),
        *("--output-dir", tmp_path / "one"),
    )
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    assert (two["world_size"], two["global_batch_size"]) == (2, one["global_batch_size"])
    assert abs(two["train_loss"] - one["train_loss"]) < 1e-3, (two["train_loss"], one["train_loss"])
    AutoModelForCausalLM.from_pretrained(tmp_path / "two" / "model")  # gathered from both ranks' shards
