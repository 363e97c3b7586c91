"""Where one optimizer step's time goes: torch.profiler over a few steady-state steps of one experiment.
    python lab/scripts/profile_steps.py OUT_DIR EXPERIMENT [workshop run options, e.g. --max-tokens-per-micro-batch 16384]
Writes OUT_DIR/profile.txt (the operators by GPU time and by CPU time) and a Chrome trace (trace.json)."""
import sys
from dataclasses import replace
from pathlib import Path

import torch
from transformers import TrainerCallback

from workshop_lib.config import parse_run_args
from workshop_lib.train import run_experiment

out, *run_args = sys.argv[1:]
WAIT, ACTIVE = 10, 3
prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                              schedule=torch.profiler.schedule(wait=WAIT, warmup=1, active=ACTIVE, repeat=1))


class Profile(TrainerCallback):
    def on_train_begin(self, *a, **k):
        prof.start()

    def on_step_end(self, *a, **k):
        prof.step()

    def on_train_end(self, *a, **k):
        prof.stop()


r = run_experiment(replace(parse_run_args(run_args), random_weights=True, max_steps=WAIT + ACTIVE + 3,
                           output_dir=f"{out}/run", overwrite=True), callbacks=[Profile()])
ka = prof.key_averages()
text = (f"steady step time {r['steady_step_time_s']} s, {r['steady_train_tokens_per_second']} tokens/s; "
        f"{ACTIVE} steps profiled\n\nby GPU time\n" + ka.table(sort_by="self_cuda_time_total", row_limit=30)
        + "\n\nby CPU time\n" + ka.table(sort_by="self_cpu_time_total", row_limit=30))
Path(out, "profile.txt").write_text(text)
prof.export_chrome_trace(f"{out}/trace.json")
print(text)
