"""`workshop run`, `report`, `export` and `eval`: the command line over `run_experiment`,
`write_report`, `checkpoint.export` and `evaluation`. Models and SQuAD are fetched by Hugging Face's own tools
(README: `hf download <model>`).

    workshop run stage2_offload --tiny                # one experiment, results in runs/stage2_offload-tiny-<time>
    workshop run stage2 --tiny --output-dir runs/x --resume   # continue runs/x from its last checkpoint
    workshop export runs/x runs/x-exported            # a ZeRO checkpoint -> a Hugging Face model directory
    workshop eval runs/x --num-questions 100          # answers, EM and F1 on SQuAD dev questions
    workshop run baseline --recipe classic            # the original workshop's recipe (BLOOM-560m, pad 512, fp16)
    workshop run --help                               # every setting: the fields of config.RunConfig
    workshop report runs/*                            # exercise table (markdown + CSV) and plots into report/

torch, transformers and pandas are imported only by the subcommand that needs them: `workshop --help` is quick.
Exit status: 0 done; 2 bad input, or a run stopped by a cause it names (the GPU's memory, a damaged checkpoint):
one message ending in "To fix: ..."; 130 stopped by SIGINT (143, 138 by SIGTERM, SIGUSR1 before
training); 75 stopped by SIGTERM or SIGUSR1 during training, with a checkpoint (continue with --resume)."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from pathlib import Path

from .errors import WorkshopError


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\nTo fix: see `{self.prog} --help`.\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="workshop", description="Fine-tune a causal LM on SQuAD with DeepSpeed and measure memory and speed."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,report,export,eval}", parser_class=_Parser)
    # `run` and `eval` only name themselves here: their options are generated from their dataclasses
    # (config.RunConfig, EvalConfig) by config.parse_args.
    sub.add_parser("run", help="run one experiment (workshop run --help lists its options)", add_help=False)
    rep = sub.add_parser("report", help="exercise tables and plots from finished runs")
    rep.add_argument("dirs", nargs="+", metavar="DIR", help="run directories, or folders holding them")
    rep.add_argument(
        "--out",
        metavar="DIR",
        help="where to write (default: report/ beside the runs: in the folder "
        "of runs given, beside the one run given, in the folder that holds the runs given)",
    )
    exp = sub.add_parser(
        "export",
        help="a ZeRO checkpoint (any stage, any world size) -> a Hugging Face model "
        "directory, through DeepSpeed's zero_to_fp32",
    )
    exp.add_argument("source", metavar="CHECKPOINT_OR_RUN_DIR", help="checkpoint-N, or a run (its last checkpoint)")
    exp.add_argument("out", metavar="OUT", help="new directory for the model")
    sub.add_parser("eval", help="generate answers for SQuAD dev questions; exact match and F1", add_help=False)
    return p


def _end_process_group() -> None:
    """Destroy the process group the run started (a multi-rank launch), once training succeeded. Left to
    interpreter shutdown, gloo's worker threads can abort a finished rank ("terminate called without an
    active exception", pytorch/pytorch#190489), and srun --kill-on-bad-exit then fails the whole job."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def run(argv: list[str]) -> int:
    from .config import parse_args

    cfg = parse_args("run", argv)
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
        print(
            f"\n{res['experiment']}: train loss {res['train_loss']}, eval loss {res['eval_loss']}, "
            + (
                f"{res['steady_train_tokens_per_second']:,.0f} tokens/s and "
                f"{res['steady_train_samples_per_second']:,.1f} questions/s steady, "
                if res["steady_train_tokens_per_second"] is not None
                else ""
            )
            + f"{gpu}, "
            f"host peak {res['host_peak_rss_mib']:,.0f} MiB\nwrote {Path(res['output_dir']) / 'results.json'}"
            + (f", the model in {Path(res['output_dir']) / 'model'}" if res["config"]["save_model"] else "")
        )
    _end_process_group()
    return 0


def report(a: argparse.Namespace) -> int:
    import pandas as pd

    from .results import write_report

    files = write_report(a.dirs, a.out or beside_runs(a.dirs))
    # for a terminal: one column per run, and only the figures this machine has (a CPU has no GPU columns);
    # report.md keeps the whole table
    t = pd.read_csv(files["table_csv"], dtype=str).fillna("n/a")
    t = t.loc[:, ~t.isin(["n/a"]).all()]
    print(t.set_index(t.columns[0]).T.to_markdown() + f"\n(every column, one row per run: {files['table_md']})")
    if "scaling_md" in files:
        print("\nScaling across world sizes:\n" + files["scaling_md"].read_text(), end="")
    print("\nwrote " + ", ".join(str(f) for f in files.values()))
    return 0


def beside_runs(dirs: list[str]) -> Path:
    """report/ beside the runs `dirs` name: inside the one folder of runs, beside the one run (never inside a
    run's own folder), or in the folder that holds them all."""
    from .rundir import state

    paths = [Path(d).absolute() for d in dirs]
    base = Path(os.path.commonpath(paths)) if paths else Path.cwd()
    if state(base)[0] != "empty":  # a run's own folder
        base = base.parent
    return base / "report"


def evaluate(cfg) -> int:
    """`workshop eval` with its `config.EvalConfig`."""
    from .evaluation import evaluate_squad

    s = evaluate_squad(
        cfg.model,
        cfg.output_dir,
        cfg.num_questions,
        eval_file=cfg.eval_file,
        batch_size=cfg.batch_size,
        max_new_tokens=cfg.max_new_tokens,
    )
    print(
        f"{s['model']}: exact match {s['em']:.2f}, F1 {s['f1']:.2f} on {s['num_questions']} SQuAD "
        f"questions (SQuAD v1.1 official normalisation, torchmetrics)\nwrote "
        f"{cfg.output_dir or cfg.model}/predictions.jsonl and squad_scores.json"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        if argv[:1] == ["run"]:
            return run(argv[1:])
        if argv[:1] == ["eval"]:
            from .config import parse_args

            return evaluate(parse_args("eval", argv[1:]))
        a = parser.parse_args(argv)
        if a.command == "export":
            from .checkpoint import export

            print(f"wrote {export(a.source, a.out)} (fp32 safetensors, config, tokenizer)")
            return 0
        return report(a)
    except WorkshopError as e:
        print(f"workshop: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a disk that filled or turned read-only after the checks (`rundir.check_writable`)
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES):
            raise
        err = WorkshopError(
            f"{e.filename or 'a file'} could not be written: {e.strerror}.",
            "free space on that disk (`df -h` shows it) or write elsewhere, then run the command again.",
        )
        print(f"workshop: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before a run installed its own handler: nothing was written
        print("workshop: interrupted (SIGINT); nothing was written.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
