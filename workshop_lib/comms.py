"""What a run's ranks sent each other, from DeepSpeed's own communication logger (introduced in `04_multi_gpu`).

`workshop run EXPERIMENT --comms-logger` adds DeepSpeed's `comms_logger` block to the ds_config
(`ds_config.COMMS_LOGGER`; DeepSpeed docs, "Communication Logging"): every collective through `deepspeed.comm` is
counted and timed per op and message size. `Window` keeps the optimizer steps only (Trainer's on_step_begin to
on_step_end; not set-up, evaluations or saving), and `write` puts DeepSpeed's summary
(`CommsLogger.log_all(return_dict=True)`) of every rank into OUTPUT_DIR/comms.json:

    {"source": ..., "world_size": N, "backend": "gloo" | "nccl" | ..., "optimizer_steps": S,
     "ops": {op: {"count": calls, "message_mib": MiB handed to the op in all, "latency_ms": total,
                  "algbw_gbps": mean, "busbw_gbps": mean, "messages": {bytes: calls}}},   # rank 0's
     "per_rank": [ops of rank 0, ops of rank 1, ...]}

A message is the tensor handed to the op (reduce_scatter_tensor: the whole input; all_gather_into_tensor: this
rank's shard). Bandwidths are DeepSpeed's (`utils/comms_logging.calc_bw_log`, Gbit/s, nccl-tests' ring factors).
The logger synchronizes the device after every collective, which undoes any overlap: a run with it on measures
volumes and counts, not speed."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback

from . import env
from .rundir import write_json_atomic
from .units import MiB

COMMS_FILE = "comms.json"
SOURCE = (
    "deepspeed.comm.comms_logger (CommsLogger.log_all), collectives inside the optimizer steps "
    "(Trainer on_step_begin to on_step_end)"
)


class TorchCollectives(TorchDispatchMode):
    """The collectives an FSDP2 run issues (torch's c10d ops, which DeepSpeed's logger never sees), counted by op
    and message bytes (the tensor handed over, as DeepSpeed's logger counts) in the layout of DeepSpeed's summary
    ({op: {bytes: {"count", ...}}}), while `Window` holds it open over an optimizer step. Collectives issued inside
    DTensor ops (the gradient norm's all-reduce, a few bytes) go through another path and are not counted."""

    def __init__(self):
        super().__init__()
        self.ops = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("c10d", "_c10d_functional"):
            name = func._overloadpacket.__name__
            t = args[1] if name in ("_allgather_base_", "_reduce_scatter_base_") else args[0]
            size = sum(x.nbytes for x in (t if isinstance(t, (list, tuple)) else [t]) if isinstance(x, torch.Tensor))
            s = self.ops.setdefault(name, {}).setdefault(
                size, {"count": 0, "total_latency_ms": 0.0, "tput_avg_gbps": 0.0, "busbw_avg_gbps": 0.0}
            )
            s["count"] += 1
        return func(*args, **(kwargs or {}))


class Window(TrainerCallback):
    """Keeps DeepSpeed's comms logger to the optimizer steps: when the Trainer is built it sets the logger on
    (`on`) or off and clears it (a module-level object: an earlier run in this process may have left it on, or
    full); at train begin it clears what the engine's set-up logged; it profiles from each step's begin to its
    end. `steps` counts the steps profiled."""

    def __init__(self, on: bool):
        self.on, self.steps = on, 0

    @staticmethod
    def _logger():
        # DeepSpeed here: importing it picks the accelerator and probes its ops; env settles both first
        import deepspeed.comm as ds_comm

        return ds_comm.comms_logger

    def on_init_end(self, args, state, control, **kw):
        log = self._logger()
        log.enabled, log.prof_all = self.on, False
        log.reset_data()

    def on_train_begin(self, args, state, control, **kw):
        if self.on:
            self._logger().prof_all = False  # the ds_config's prof_all: true switched it on for the set-up
            self._logger().reset_data()

    def on_step_begin(self, args, state, control, **kw):
        if self.on and getattr(args, "fsdp", None):
            self.mode = getattr(self, "mode", None) or TorchCollectives()
            self.mode.__enter__()
        elif self.on:
            self._logger().prof_all = True

    def on_step_end(self, args, state, control, **kw):
        if self.on and getattr(self, "mode", None):
            self.mode.__exit__(None, None, None)
            self.steps += 1
        elif self.on:
            self._logger().prof_all = False
            self.steps += 1


def summary(raw: dict) -> dict:
    """DeepSpeed's summary {op: {message bytes: {"count", "total_latency_ms", "tput_avg_gbps", "busbw_avg_gbps", ...}}}
    (`CommsLogger.log_all(return_dict=True)["summary"]`) -> per op: calls, MiB handed to the op in all, total latency
    ms, call-weighted mean algorithmic and bus bandwidth (Gbit/s), and the calls per message size (bytes)."""
    ops = {}
    for op, sizes in raw.items():
        count = sum(v["count"] for v in sizes.values())
        ops[op] = {
            "count": count,
            "message_mib": round(sum(int(b) * v["count"] for b, v in sizes.items()) / MiB, 4),
            "latency_ms": round(sum(v["total_latency_ms"] for v in sizes.values()), 3),
            "algbw_gbps": round(sum(v["tput_avg_gbps"] * v["count"] for v in sizes.values()) / count, 4),
            "busbw_gbps": round(sum(v["busbw_avg_gbps"] * v["count"] for v in sizes.values()) / count, 4),
            "messages": {str(b): v["count"] for b, v in sorted(sizes.items())},
        }
    return ops


def write(out: Path, trainer) -> dict | None:
    """Every rank's comms summary gathered (a collective: every rank calls it), written by rank 0 to
    out/comms.json; the logger then turned off and cleared. Returns the file's content (None on other ranks)."""
    window = next(c for c in trainer.callback_handler.callbacks if isinstance(c, Window))
    log = Window._logger()
    mode = getattr(window, "mode", None)
    mine = summary(mode.ops if mode else log.log_all(print_log=False, return_dict=True)["summary"])
    log.enabled = log.prof_all = False
    log.reset_data()
    ranks = env.gather(mine)  # torch.distributed's own gather: DeepSpeed's would log itself
    if dist.is_initialized() and dist.get_rank() != 0:
        return None
    data = {
        "source": SOURCE,
        "world_size": len(ranks),
        "backend": dist.get_backend() if dist.is_initialized() else None,
        "optimizer_steps": window.steps,
        "ops": ranks[0],
        "per_rank": ranks,
    }
    write_json_atomic(Path(out) / COMMS_FILE, data)
    return data
