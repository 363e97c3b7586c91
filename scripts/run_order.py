"""Does a run's place in one process decide its speed? Notebook 02's runs as the notebook makes them
(`lessons.run_config`, `lessons.notebook_run_options(size_micro_batches=True)`), in one process and without
`lessons.warm_up`, in the order stage2, baseline, stage1, stage2, stage3, baseline, stage2: stage2 first,
fourth and seventh, baseline second and sixth. Each run's steady tokens/s (`metrics.steady_state`) and its
ratio to the mean of the same experiment's runs, against the reference band (`lessons.band`), into OUT/run_order.csv
and OUT/run_order.md; the runs themselves (results.json, train_log.csv) under OUT/runs/<position>-<name>.

    python scripts/run_order.py OUT                      # on a GPU: about 5 minutes on an H100 (Qwen3-0.6B)
    WORKSHOP_RANDOM_WEIGHTS=1 python scripts/run_order.py docs/h100/run-order
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pandas as pd  # noqa: E402

import workshop_lessons as lessons  # noqa: E402
from workshop_lib import env  # noqa: E402
from workshop_lib.train import run_experiment  # noqa: E402

NOTEBOOK, ORDER = "02_zero_stages", ["stage2", "baseline", "stage1", "stage2", "stage3", "baseline", "stage2"]
TPS = "steady_train_tokens_per_second"


def main(out: Path) -> None:
    common = lessons.notebook_run_options(size_micro_batches=True)
    rows = []
    for position, name in enumerate(ORDER, 1):
        cfg = lessons.run_config(NOTEBOOK, name, out / "runs", **common)
        cfg.output_dir, cfg.save_model = str(out / "runs" / f"{position}-{name}"), False
        r = run_experiment(cfg)
        rows.append(
            {
                "position": position,
                "run": name,
                TPS: r[TPS],
                "warmup_steps": r["warmup_steps"],
                "steady_steps": r["steady_steps"],
                "device": env.device_name(),
            }
        )
        print(f"{position}. {name}: {r[TPS]:,.0f} tokens/s", flush=True)
    df = pd.DataFrame(rows)
    df["of the experiment's mean"] = (df[TPS] / df.groupby("run")[TPS].transform("mean")).round(3)
    df.to_csv(out / "run_order.csv", index=False)
    band = lessons.band(TPS)
    worst = (df.groupby("run")[TPS].agg(lambda s: (s.max() - s.min()) / s.mean())).round(3)
    (out / "run_order.md").write_text(
        f"# Run order in one process, {df['device'].iloc[0]}\n\n"
        + df.drop(columns="device").to_markdown(index=False)
        + "\n\nLargest spread between one experiment's runs, of their mean: "
        + ", ".join(f"{k} {v:.1%}" for k, v in worst.items())
        + f"; the reference band: ±{band:.1%}.\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
