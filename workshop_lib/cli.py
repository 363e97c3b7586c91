"""`workshop run` and `workshop report`: the command line over `run_experiment` and `write_report`.

    workshop run stage2_offload --tiny                # one experiment, results in runs/stage2_offload-tiny-<time>
    workshop run baseline --recipe classic            # the original workshop's recipe (BLOOM-560m, pad 512, fp16)
    workshop run --help                               # every setting: the fields of config.RunConfig
    workshop report runs/*                            # exercise table (markdown + CSV) and plots into report/
    workshop bench --out docs/h100/bench              # recipes and ZeRO settings vs a plain PyTorch loop, one GPU

torch, transformers and pandas are imported only by the subcommand that needs them: `workshop --help` is quick.
Exit status: 0 done; 2 bad input (one message ending in "To fix: ..."); 130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import sys

from .errors import WorkshopError


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\nTo fix: see `{self.prog} --help`.\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="workshop", description="Fine-tune a causal LM on SQuAD with DeepSpeed "
                                "and measure memory and speed.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,bench,report}", parser_class=_Parser)
    # `run` only names itself here: its options are generated from RunConfig by config.parse_run_args.
    sub.add_parser("run", help="run one experiment (workshop run --help lists its options)", add_help=False)
    bench = sub.add_parser("bench", help="every recipe and ZeRO setting against a plain PyTorch loop, one GPU")
    bench.add_argument("--out", default="bench", metavar="DIR", help="where to write (default bench/)")
    bench.add_argument("--model", help="hub name or local directory (default: each recipe's)")
    bench.add_argument("--max-steps", type=int, default=30, metavar="N", help="optimizer steps per row (default 30)")
    bench.add_argument("--tiny", action="store_true", help="the tiny model (a CPU check of the benchmark itself)")
    bench.add_argument("--only", nargs="+", metavar="ROW", help="only these rows (labels of bench.VARIANTS)")
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


def run(argv: list[str]) -> int:
    from .config import parse_run_args

    cfg = parse_run_args(argv)
    from .env import world
    from .rundir import RunInterrupted
    from .train import run_experiment

    try:
        res = run_experiment(cfg)
    except RunInterrupted as e:
        if world()[0] == 0:
            print(f"\nworkshop: {e}", file=sys.stderr)  # on a line of its own, after any progress bar
        return e.exit_code
    if world()[0] == 0:
        gpu = f"{res['gpu_peak_mib']:,.0f} MiB GPU peak" if res["gpu_peak_mib"] else "no GPU"
        print(f"\n{res['experiment']}: train loss {res['train_loss']}, eval loss {res['eval_loss']}, "
              f"{res['train_samples_per_second']} samples/s, {gpu}, "
              f"host peak {res['host_peak_rss_mib']:,.0f} MiB\nwrote {res['output_dir']}/results.json")
    _end_process_group()
    return 0


def report(a: argparse.Namespace) -> int:
    from .results import write_report

    files = write_report(a.dirs, a.out)
    print(files["table_md"].read_text(), end="")
    if "scaling_md" in files:
        print("\nScaling across world sizes:\n" + files["scaling_md"].read_text(), end="")
    print("\nwrote " + ", ".join(str(f) for f in files.values()))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        if argv[:1] == ["run"]:
            return run(argv[1:])
        a = parser.parse_args(argv)
        if a.command == "bench":
            from .bench import run_bench

            run_bench(a.out, a.model, a.max_steps, a.tiny, a.only)
            _end_process_group()
            return 0
        return report(a)
    except WorkshopError as e:
        print(f"workshop: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before a run installed its own handler: nothing was written
        print("workshop: interrupted (SIGINT); nothing was written.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
