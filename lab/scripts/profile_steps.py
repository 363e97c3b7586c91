"""Where one optimizer step's time goes: torch.profiler over steady-state steps of one experiment.
    python lab/scripts/profile_steps.py OUT_DIR EXPERIMENT [workshop run options, e.g. --max-tokens-per-micro-batch 16384]
    STEPS=17,18,19 PER_STEP=1 PACKED=1 python lab/scripts/profile_steps.py OUT_DIR stage2   # packed rows (lab/packing.py)
STEPS: the optimizer steps profiled, counted from 1 (default 12,13,14), the step before them the profiler's warm-up;
one table over all of them, or with PER_STEP=1 one per step. Writes OUT_DIR/profile.txt (the operators by GPU time
and by CPU time) and a Chrome trace per table (trace-STEPS.json)."""
import os
import sys
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lab import packing  # noqa: E402
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


def report(p) -> None:
    label = ",".join(map(str, tables[len(text)]))
    ka = p.key_averages()
    text.append(f"== step {label}\n\nby GPU time\n" + ka.table(sort_by="self_cuda_time_total", row_limit=30)
                + "\n\nby CPU time\n" + ka.table(sort_by="self_cpu_time_total", row_limit=30))
    p.export_chrome_trace(f"{out}/trace-{label}.json")


prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                              schedule=action,
                              on_trace_ready=report)


class Profile(TrainerCallback):
    def on_train_begin(self, *a, **k):
        prof.start()

    def on_step_end(self, *a, **k):
        prof.step()

    def on_train_end(self, *a, **k):
        prof.stop()


Path(out).mkdir(parents=True, exist_ok=True)
with packing.packed() if os.environ.get("PACKED") == "1" else nullcontext():
    r = run_experiment(replace(parse_run_args(run_args), random_weights=True, max_steps=max(STEPS) + 2,
                               output_dir=f"{out}/run", overwrite=True), callbacks=[Profile()])
Path(out, "profile.txt").write_text(f"steady step time {r['steady_step_time_s']} s, {r['steady_train_tokens_per_second']} "
                                    "tokens/s\n\n" + "\n\n".join(text))
print(Path(out, "profile.txt").read_text())
