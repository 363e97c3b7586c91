import json
from pathlib import Path

import pytest

from workshop_lib.ds_config import build_ds_config, shipped_configs
from workshop_lib.errors import WorkshopError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_stage_and_batch_arithmetic(stage):
    cfg = build_ds_config(stage, precision="bf16", train_micro_batch_size_per_gpu=4, gradient_accumulation_steps=4,
                          world_size=8)
    assert cfg["zero_optimization"]["stage"] == stage
    assert cfg["train_batch_size"] == 4 * 4 * 8  # micro x accumulation x world_size
    assert cfg["bf16"]["enabled"] is True and cfg["fp16"]["enabled"] is False
    assert "offload_optimizer" not in cfg["zero_optimization"]


def test_offload_sections():
    z2 = build_ds_config(2, offload_optimizer="cpu")["zero_optimization"]
    assert z2["offload_optimizer"]["device"] == "cpu" and "offload_param" not in z2
    z3 = build_ds_config(3, offload_optimizer="cpu", offload_param="cpu")["zero_optimization"]
    assert z3["offload_param"]["device"] == "cpu" and z3["offload_optimizer"]["device"] == "cpu"


@pytest.mark.parametrize("kwargs, expected", [
    (dict(zero_stage=0, offload_optimizer="cpu"), "stage 1, 2 or 3"),
    (dict(zero_stage=2, offload_param="cpu"), "needs ZeRO stage 3"),
    (dict(zero_stage=3, offload_param="nvme"), "nvme_path"),
    (dict(zero_stage=2, offload_optimizer="gpu"), "Unknown offload device"),
    (dict(zero_stage=4), "0, 1, 2 or 3"),
    (dict(zero_stage=1, precision="fp8"), "Unknown precision"),
])
def test_impossible_configs_are_refused(kwargs, expected):
    with pytest.raises(WorkshopError, match=expected):
        build_ds_config(**kwargs)


def test_shipped_json_files_are_generated_from_build_ds_config():
    shipped = shipped_configs()
    on_disk = {p.name: p.read_text() for p in (ROOT / "configs").glob("ds_*.json")}
    assert on_disk == shipped, "configs/ is stale. To fix: python -m workshop_lib.ds_config configs"
    assert json.loads(shipped["ds_zero3_offload.json"])["train_batch_size"] == "auto"


def test_nvme_offload_sizes_its_buffers_and_turns_off_prefetch():
    """ZeRO-Infinity: DeepSpeed's async I/O section, one parameter buffer per tensor in use (each at least the
    largest tensor), and no prefetching or reuse caching, which hold buffers (DeepSpeed issues #3062, #3506)."""
    cfg = build_ds_config(3, "nvme", "nvme", nvme_path="/tmp", nvme_buffer_size=155_582_464, nvme_buffer_count=24)
    zero = cfg["zero_optimization"]
    assert zero["offload_param"] == {"device": "nvme", "pin_memory": True, "nvme_path": "/tmp", "buffer_count": 24,
                                     "buffer_size": 155_582_464}
    assert zero["offload_optimizer"]["nvme_path"] == "/tmp"
    assert zero["stage3_prefetch_bucket_size"] == 0 and zero["stage3_max_reuse_distance"] == 0
    assert cfg["aio"]["block_size"] == 1_048_576
    assert "aio" not in build_ds_config(3, "cpu", "cpu")


def test_comms_logger_block_only_when_asked_and_deepspeed_reads_it():
    from deepspeed.comm.config import DeepSpeedCommsConfig

    from workshop_lib.ds_config import COMMS_LOGGER

    assert "comms_logger" not in build_ds_config(2)
    on = build_ds_config(2, comms_logger=True)
    assert on["comms_logger"] == {"enabled": True, "verbose": False, "prof_all": True, "debug": False} == COMMS_LOGGER
    parsed = DeepSpeedCommsConfig(on)  # DeepSpeed's own parser of the block (deepspeed/comm/config.py)
    assert parsed.comms_logger_enabled and parsed.comms_logger.prof_all and not parsed.comms_logger.verbose
    assert {k: v for k, v in on.items() if k != "comms_logger"} == build_ds_config(2)  # nothing else changes
