"""ZenFlow through the HF Trainer: its own update schedule, which accelerate overrides.

ZenFlow (DeepSpeed >= 0.17.5, `zero_optimization.zenflow`; https://www.deepspeed.ai/tutorials/zenflow/) updates
the `topk_ratio` share of gradient columns on the GPU every step and the rest on the CPU every `update_interval`
steps, overlapped with the next steps. It decides those boundaries itself (`is_zenflow_update_boundary`) unless a
boundary was set by hand, which accelerate's `DeepSpeedEngineWrapper.backward` (1.15) does at every micro-batch:
every step then becomes a full CPU update, and nothing overlaps (`lab/findings/h100/zenflow`). `own_update_boundaries`
lets ZenFlow's engines decide, as DeepSpeed's own examples do, and leaves every other engine to accelerate.

With `overlap_step` (on a GPU), DeepSpeed 0.19.8's `start_optimizer_process` narrows this process's CPU affinity and
OMP_NUM_THREADS to half the cores and undoes neither; `own_update_boundaries` stops its process and restores both when
training ends, so a later run in the same process (a notebook kernel) gets the cores a fresh process would."""

from __future__ import annotations

import os
from contextlib import contextmanager

from accelerate.utils.deepspeed import DeepSpeedEngineWrapper


@contextmanager
def own_update_boundaries():
    """Within the block, accelerate's DeepSpeed wrapper leaves the update boundary of an engine with ZenFlow
    (`engine.zenflow`) to ZenFlow's schedule; other engines are driven as before. Restored on exit, with what
    ZenFlow's overlap_step changed in this process (see the module)."""
    accelerate_backward = DeepSpeedEngineWrapper.backward
    # what overlap_step narrows (Linux has CPU affinity; macOS has none, and no overlap_step without CUDA)
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    engines, threads = [], os.environ.get("OMP_NUM_THREADS")

    def backward(self, loss, sync_gradients=True, **kwargs):
        if not getattr(self.engine, "zenflow", False):
            return accelerate_backward(self, loss, sync_gradients, **kwargs)
        if not any(e is self.engine for e in engines):
            engines.append(self.engine)
        self.engine._is_gradient_accumulation_boundary = None  # ZenFlow's schedule decides (see the module)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    DeepSpeedEngineWrapper.backward = backward
    try:
        yield
    finally:
        DeepSpeedEngineWrapper.backward = accelerate_backward
        for engine in engines:  # overlap_step's CPU-update process (absent without overlap_step)
            process = getattr(engine.optimizer, "process", None)
            if process is not None and process.is_alive():
                process.terminate()
                process.join(timeout=30)
        if engines:
            if affinity is not None:
                os.sched_setaffinity(0, affinity)
            if threads is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = threads
