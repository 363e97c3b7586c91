"""`workshop run` and `workshop report`: the command line over `run_experiment` and `write_report`.

    workshop run stage2_offload --tiny                # one experiment, results in runs/stage2_offload-tiny-<time>
    workshop run baseline --recipe classic            # the original workshop's recipe (BLOOM-560m, pad 512, fp16)
    workshop report runs/*                            # exercise table (markdown + CSV) and plots into report/
"""

from __future__ import annotations

import argparse
import sys

from .errors import WorkshopError
from .train import EXPERIMENTS, RECIPES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workshop", description="Fine-tune a causal LM on SQuAD with DeepSpeed "
                                "and measure memory and speed.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run one experiment", description="Run one experiment and write "
                       "results.json, memory.csv, train_log.csv and ds_config.json into the output directory.")
    r.add_argument("experiment", choices=list(EXPERIMENTS), metavar="EXPERIMENT",
                   help=f"one of: {', '.join(EXPERIMENTS)}")
    r.add_argument("--tiny", action="store_true", help="tiny model of the same family (CPU-friendly, no download)")
    r.add_argument("--model", help="hub name or local path (default: the recipe's, Qwen/Qwen3-0.6B or "
                   "bigscience/bloom-560m for classic)")
    r.add_argument("--recipe", choices=list(RECIPES), default="default")
    r.add_argument("--random-weights", action="store_true",
                   help="the published architecture with random weights (no download; for memory and speed)")
    r.add_argument("--train-file", help="SQuAD-format JSON to train on instead of SQuAD")
    r.add_argument("--eval-file", help="SQuAD-format JSON to evaluate on instead of SQuAD dev")
    r.add_argument("--num-train-samples", type=int, metavar="N", help="questions to train on (default 500)")
    r.add_argument("--num-eval-samples", type=int, metavar="N", help="questions to evaluate on (default 50)")
    r.add_argument("--epochs", type=int, metavar="N", help="default 3")
    r.add_argument("--max-steps", type=int, metavar="N", help="stop after N optimizer steps")
    r.add_argument("--micro-batch-size", type=int, metavar="N", help="train_micro_batch_size_per_gpu (default 4)")
    r.add_argument("--gradient-accumulation-steps", type=int, metavar="N", help="default 4")
    r.add_argument("--loss-on", choices=["answer", "all"], help="answer tokens only, or every token")
    r.add_argument("--output-dir", metavar="DIR", help="default runs/<experiment>[-tiny]-<date-time>")
    r.add_argument("--overwrite", action="store_true", help="replace a finished run in --output-dir")
    r.add_argument("--allow-cpu", action="store_true", help="run a full-size model without a GPU (slow)")
    r.add_argument("--seed", type=int, default=42)
    rep = sub.add_parser("report", help="exercise tables and plots from finished runs")
    rep.add_argument("dirs", nargs="+", metavar="DIR", help="run directories, or folders holding them")
    rep.add_argument("--out", default="report", metavar="DIR", help="where to write (default report/)")
    return p


def _end_process_group() -> None:
    """Destroy the process group the run started (a multi-rank launch), once training succeeded. Left to
    interpreter shutdown, gloo's worker threads can abort a finished rank ("terminate called without an
    active exception", pytorch/pytorch#190489), and srun --kill-on-bad-exit then fails the whole job."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.command == "run":
            from .train import run_experiment

            res = run_experiment(
                a.experiment, tiny=a.tiny, model=a.model, recipe=a.recipe, train_file=a.train_file,
                eval_file=a.eval_file, num_train_samples=a.num_train_samples, num_eval_samples=a.num_eval_samples,
                epochs=a.epochs, max_steps=a.max_steps, micro_batch_size=a.micro_batch_size,
                gradient_accumulation_steps=a.gradient_accumulation_steps, loss_on=a.loss_on,
                random_weights=a.random_weights, output_dir=a.output_dir, overwrite=a.overwrite,
                allow_cpu=a.allow_cpu, seed=a.seed)
            from .env import world

            if world()[0] == 0:
                gpu = f"{res['gpu_peak_mib']:,.0f} MiB GPU peak" if res["gpu_peak_mib"] else "no GPU"
                print(f"\n{res['experiment']}: train loss {res['train_loss']}, eval loss {res['eval_loss']}, "
                      f"{res['train_samples_per_second']} samples/s, {gpu}, "
                      f"host peak {res['host_peak_rss_mib']:,.0f} MiB\nwrote {res['output_dir']}/results.json")
            _end_process_group()
        else:
            from .results import write_report

            files = write_report(a.dirs, a.out)
            print(files["table_md"].read_text(), end="")
            if "scaling_md" in files:
                print("\nScaling across world sizes:\n" + files["scaling_md"].read_text(), end="")
            print("\nwrote " + ", ".join(str(f) for f in files.values()))
    except WorkshopError as e:
        print(f"workshop: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
