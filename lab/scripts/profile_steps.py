"""Where one optimizer step's time goes: torch.profiler over steady-state steps of one experiment.
    python lab/scripts/profile_steps.py OUT_DIR EXPERIMENT [workshop run options, e.g. --max-tokens-per-micro-batch 16384]
    STEPS=17,18,19 PER_STEP=1 PACKED=1 python lab/scripts/profile_steps.py OUT_DIR stage2   # packed rows (lab/packing.py)
    LIGER=1 python lab/scripts/profile_steps.py OUT_DIR stage3   # Liger-Kernel's layers (lab.bench.Liger)
STEPS: the optimizer steps profiled, counted from 1 (default 12,13,14), the step before them the profiler's warm-up;
one table over all of them, or with PER_STEP=1 one per step. Writes OUT_DIR/profile.txt (per step: its wall time, the
GPU's busy time and copies, the host time of DeepSpeed's engine.forward/backward/step; then the operators by GPU time
and by CPU time) and a Chrome trace per table (trace-STEPS.json)."""

import json
import os
import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
from deepspeed.runtime.engine import DeepSpeedEngine
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lab import packing  # noqa: E402
from lab.bench import Liger  # noqa: E402
from workshop_lib.config import parse_run_args  # noqa: E402
from workshop_lib.train import run_experiment  # noqa: E402

out, *run_args = sys.argv[1:]
STEPS = [int(s) for s in os.environ.get("STEPS", "12,13,14").split(",")]
PER_STEP = os.environ.get("PER_STEP") == "1"
Action = torch.profiler.ProfilerAction
tables = [[s] for s in STEPS] if PER_STEP else [STEPS]
text = []


def action(i: int):
    step = i + 1
    if step + 1 == min(STEPS):
        return Action.WARMUP
    if step not in STEPS:
        return Action.NONE
    return Action.RECORD_AND_SAVE if any(step == t[-1] for t in tables) else Action.RECORD


def timed(name: str):
    """DeepSpeedEngine.NAME inside a profiler range `engine.NAME`, so the trace shows the step's phases."""
    method = getattr(DeepSpeedEngine, name)

    def wrapper(*args, **kwargs):
        with torch.profiler.record_function(f"engine.{name}"):
            return method(*args, **kwargs)

    setattr(DeepSpeedEngine, name, wrapper)


for phase in ("forward", "backward", "step"):
    timed(phase)


def busy_ms(spans: list, lo: float, hi: float) -> float:
    """Length in ms of the union of the (start, end) spans in microseconds, clipped to [lo, hi]."""
    total, end = 0.0, lo
    for a, b in sorted(spans):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total, end = total + b - a, b
    return total / 1e3


def timeline(trace: str) -> str:
    """Per profiled step of a Chrome trace: wall ms, GPU busy ms (kernels, copies, memsets), copies ms, phases' ms."""
    events = [e for e in json.loads(Path(trace).read_text())["traceEvents"] if e.get("ph") == "X"]
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    copies = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "gpu_memcpy"]
    lines = []
    steps = [e for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"]
    for s in sorted(steps, key=lambda e: e["ts"]):
        lo, hi = s["ts"], s["ts"] + s["dur"]
        phases = {}
        for e in events:
            if e["name"].startswith("engine.") and lo <= e["ts"] < hi and e.get("cat") == "user_annotation":
                phases[e["name"]] = phases.get(e["name"], 0.0) + e["dur"] / 1e3
        step = int(s["name"].removeprefix("ProfilerStep#")) + 1  # the profiler counts from 0, `action` from 1
        host = ", ".join(f"{k} {v:.1f} ms" for k, v in phases.items())
        lines.append(
            f"step {step}: wall {s['dur'] / 1e3:.1f} ms, GPU busy {busy_ms(gpu, lo, hi):.1f} ms, copies "
            f"{busy_ms(copies, lo, hi):.1f} ms; host {host}"
        )
    return "\n".join(lines)


def report(p) -> None:
    label = ",".join(map(str, tables[len(text)]))
    ka = p.key_averages()
    p.export_chrome_trace(f"{out}/trace-{label}.json")
    text.append(
        f"== step {label}\n\n{timeline(f'{out}/trace-{label}.json')}\n\nby GPU time\n"
        + ka.table(sort_by="self_cuda_time_total", row_limit=30)
        + "\n\nby CPU time\n"
        + ka.table(sort_by="self_cpu_time_total", row_limit=30)
    )


prof = torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
    schedule=action,
    on_trace_ready=report,
)


class Profile(TrainerCallback):
    def on_train_begin(self, *a, **k):
        prof.start()

    def on_step_end(self, *a, **k):
        prof.step()

    def on_train_end(self, *a, **k):
        prof.stop()


Path(out).mkdir(parents=True, exist_ok=True)
with packing.packed() if os.environ.get("PACKED") == "1" else nullcontext():
    r = run_experiment(
        replace(
            parse_run_args(run_args),
            random_weights=True,
            max_steps=max(STEPS) + 2,
            output_dir=f"{out}/run",
            overwrite=True,
        ),
        callbacks=[Profile()] + ([Liger()] if os.environ.get("LIGER") == "1" else []),
    )
Path(out, "profile.txt").write_text(
    f"steady step time {r['steady_step_time_s']} s, "
    f"{r['steady_train_tokens_per_second']} tokens/s\n\n" + "\n\n".join(text)
)
print(Path(out, "profile.txt").read_text())
