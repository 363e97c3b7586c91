"""What a micro-batch shape costs the first time a process runs it, on a GPU. One run of stage2 in a fresh
process (notebook 02's run: random weights, micro-batches sized for this GPU, 24 optimizer steps), with per
micro-batch: whether its shape (sequences x padded length) is new to the process, its forward time (CUDA events)
and the CUDA caching allocator's new segments (cudaMalloc calls) in its step. Steps PROFILE=a-b (default 6-16)
are each profiled alone (torch.profiler, CPU and CUDA): the host operators by self CPU time, new shapes against
seen ones. Run it under other settings to test a cause, e.g. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or
TORCHINDUCTOR_COMPILE_THREADS=1 (PROFILE=0-0 for no profile); SDPA_CUDNN=1 keeps SDPA's cuDNN kernel, which
the engine turns off (`train.apply_speed_levers`). Behind lab/findings/h100/new-shapes:

    python lab/scripts/new_shapes.py OUT
"""

import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
if os.environ.get("SDPA_CUDNN") == "1":  # torch's compile caches key on the graph before SDPA picks its kernel:
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor-sdpa-cudnn")  # keep cuDNN's graphs apart
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

import workshop_lessons as lessons  # noqa: E402
from workshop_lib import env  # noqa: E402
from workshop_lib.train import run_experiment  # noqa: E402

first, last = map(int, os.environ.get("PROFILE", "6-16").split("-"))
if os.environ.get("SDPA_CUDNN") == "1":
    torch.backends.cuda.enable_cudnn_sdp = lambda enabled: None  # the engine's call turns nothing off
stats = torch.cuda.memory_stats if torch.cuda.is_available() else dict  # no allocator on a CPU


class Steps(TrainerCallback):
    def __init__(self):
        self.rows, self.prof, self.tables = [], None, []

    def on_step_begin(self, args, state, control, **kw):
        self.segments = stats().get("segment.all.allocated", 0)
        if first <= state.global_step + 1 <= last:
            self.prof = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            )
            self.prof.start()

    def on_step_end(self, args, state, control, **kw):
        row = {"step": state.global_step, "new_segments": stats().get("segment.all.allocated", 0) - self.segments}
        if self.prof:
            self.prof.stop()
            ka = self.prof.key_averages()
            row["profiled_self_cpu_ms"] = sum(e.self_cpu_time_total for e in ka) / 1e3
            self.tables.append((state.global_step, ka.table(sort_by="self_cpu_time_total", row_limit=15)))
            self.prof = None
        self.rows.append(row)


def main(out: Path) -> None:
    common = lessons.notebook_run_options(size_micro_batches=True) | {"random_weights": True}
    cfg = lessons.run_config("02_zero_stages", "stage2", out, **common)
    cfg.output_dir, cfg.save_model = str(out / "run"), False
    steps = Steps()
    r = run_experiment(cfg, callbacks=[steps])
    mb = pd.read_csv(out / "run" / "micro_batches.csv")
    seen = Counter()
    mb["new_shape"] = [not seen.update([s]) and seen[s] == 1 for s in zip(mb.sequences, mb.length)]
    mb["us_per_token"] = (mb.forward_ms * 1e3 / (mb.sequences * mb.length)).round(3)
    df = mb.merge(pd.DataFrame(steps.rows), on="step", how="left")
    df.to_csv(out / "new_shapes.csv", index=False)
    steady = df[df.step > 3]
    by = steady.groupby("new_shape").agg(
        micro_batches=("step", "size"),
        forward_ms=("forward_ms", "median"),
        us_per_token=("us_per_token", "median"),
        new_segments=("new_segments", "mean"),
    )
    settings = {
        k: os.environ.get(k, "") for k in ("PYTORCH_CUDA_ALLOC_CONF", "TORCHINDUCTOR_COMPILE_THREADS", "SDPA_CUDNN")
    }
    text = (
        f"{env.device_name()}, {settings}; steady tokens/s {r['steady_train_tokens_per_second']:,.0f}"
        f"\n\nsteps 4-: medians by whether the shape is new to the process\n{by.to_string()}\n\n"
        + df.to_string(index=False)
        + "\n\n"
        + "\n\n".join(
            f"step {s} (shape new: {bool(df.loc[df.step == s, 'new_shape'].any())})\n{t}" for s, t in steps.tables
        )
    )
    (out / "new_shapes.txt").write_text(text)
    print(text[:3000])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
