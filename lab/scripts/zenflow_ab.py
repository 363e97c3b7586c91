"""ZenFlow against ZeRO-2 + CPU offload, through the workshop's own Trainer path, in one process after a
warm-up run: `workshop run stage2_offload` as it is, then the same run with DeepSpeed's ZenFlow section added
through --ds-config (`zero_optimization.zenflow`: the top `TOPK` share of gradient columns updated on the GPU
every step, the rest on the CPU every `UPDATE` steps, the selection renewed every `SELECT` steps; explicit
values, since the Trainer does not fill ZenFlow's "auto" ones). Random weights, `STEPS` optimizer steps,
micro-batches of up to 16,384 tokens. Writes OUT/summary.md (steady tokens/s, peaks, losses step by step and
their difference) and keeps each run's results.json and train_log.csv under OUT/runs:

    WORKSHOP_RANDOM_WEIGHTS=1 python lab/scripts/zenflow_ab.py OUT [--tiny]
"""

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STEPS, TOPK, SELECT, UPDATE = 24, 0.1, 4, 2
ZENFLOW = [
    f"zero_optimization.zenflow.{k}={v}"
    for k, v in {
        "topk_ratio": TOPK,
        "select_strategy": '"step"',
        "select_interval": SELECT,
        "update_interval": UPDATE,
        "full_warm_up_rounds": 0,
    }.items()
]
OVERLAP = "zero_optimization.zenflow.overlap_step="


def main(out: Path, tiny: bool) -> None:
    import pandas as pd

    from workshop_lib.config import RunConfig
    from workshop_lib.train import run_experiment

    common = dict(
        tiny=tiny,
        random_weights=not tiny,
        max_steps=STEPS,
        save_strategy="no",
        save_model=False,
        overwrite=True,
        **({} if tiny else {"max_tokens_per_micro_batch": 16384}),
    )
    runs = {
        "warm-up": [],
        "stage2_offload": [],
        "stage2_offload_zenflow": [*ZENFLOW, OVERLAP + "true"],
        "stage2_offload_zenflow_no_overlap": [*ZENFLOW, OVERLAP + "false"],
    }
    results, logs = {}, {}
    for name, overrides in runs.items():
        d = out / "runs" / name
        results[name] = run_experiment(
            RunConfig("stage2_offload", output_dir=str(d), ds_config=overrides or None, **common)
        )
        logs[name] = pd.read_csv(d / "train_log.csv").dropna(subset=["loss"])
    shutil.rmtree(out / "runs" / "warm-up")
    base, names = results["stage2_offload"], ["stage2_offload_zenflow", "stage2_offload_zenflow_no_overlap"]
    fig = [
        "steady_train_tokens_per_second",
        "steady_step_time_s",
        "gpu_peak_allocated_mib",
        "gpu_peak_mib",
        "host_peak_rss_mib",
        "train_loss",
    ]
    rows = [
        "| figure | stage2_offload | + ZenFlow (overlap_step) | ratio | + ZenFlow (no overlap) | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for f in fig:
        x, cells = base.get(f), []
        for n in names:
            y = results[n].get(f)
            cells += [str(y), f"{y / x:.2f}x" if x and y is not None else ""]
        rows.append(f"| {f} | {x} | " + " | ".join(cells) + " |")
    loss = {n: logs[n].set_index("step")["loss"] for n in ["stage2_offload", *names]}
    steps = [
        "| step | loss, offload | ZenFlow - offload | ZenFlow (no overlap) - offload |",
        "| --- | --- | --- | --- |",
    ]
    diffs = {n: (loss[n] - loss["stage2_offload"]).dropna() for n in names}
    steps += [
        f"| {s} | {loss['stage2_offload'][s]:.4f} | "
        + " | ".join(f"{diffs[n].get(s, float('nan')):+.4f}" for n in names)
        + " |"
        for s in loss["stage2_offload"].index
    ]
    text = (
        f"# ZenFlow against ZeRO-2 + CPU offload ({base.get('device')}, "
        f"{'tiny model' if tiny else base['config']['model']})\n\n"
        f"Made by `python lab/scripts/zenflow_ab.py` (its docstring says how): {STEPS} steps each, one process, after "
        f"a warm-up run; ZenFlow with topk_ratio {TOPK}, select_interval {SELECT}, update_interval {UPDATE}.\n\n"
        + "\n".join(rows)
        + "\n\nLoss at each logged step (the same batches in the same order):\n\n"
        + "\n".join(steps)
        + "\n\n"
        + "".join(
            f"{n}: largest |difference| {diffs[n].abs().max():.4f} nats, mean {diffs[n].mean():+.4f} nats.\n"
            for n in names
        )
    )
    (out / "summary.md").write_text(text)
    for name in ("stage2_offload", *names):
        keep = out / "runs" / name
        for f in keep.iterdir():
            if f.name not in ("results.json", "train_log.csv", "ds_config.json", "run_config.json"):
                shutil.rmtree(f) if f.is_dir() else f.unlink()
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--tiny" in sys.argv[2:])
