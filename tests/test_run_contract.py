"""The run contract: every bad input stops with exit status 2, one message ending in a "To fix:" line, no
traceback, and the output directory exactly as it was; a run in progress is marked, results are atomic,
--overwrite replaces a run whole, SIGINT / SIGTERM end a run with one line and 130 / 143.

The bad-input cases run `workshop` in this process (`cli.main`: fast, the same code path as the command);
the signal tests start the real command in a subprocess and are marked slow."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import HANG_S, Workshop, workshop
from workshop_lib import checkpoint, cli, env, results, rundir
from workshop_lib.config import RunConfig, cli_args, parse_run_args, resolve
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.errors import WorkshopError

ROOT = Path(__file__).resolve().parent.parent
SQUAD = {
    "data": [
        {
            "title": "T",
            "paragraphs": [
                {
                    "context": "Paris is the capital of France.",
                    "qas": [
                        {
                            "id": "a",
                            "question": "What is the capital of France?",
                            "answers": [{"text": "Paris", "answer_start": 0}],
                        }
                    ],
                }
            ],
        }
    ]
}


def snapshot(path: Path):
    """Every file under `path` with its content hash, or None when `path` does not exist."""
    if not path.exists():
        return None
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(path.rglob("*"))
    }


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """Local model directories: complete (tiny Qwen3 saved with its tokenizer), without weights, without a
    tokenizer, and one whose config needs custom code."""
    import torch

    from workshop_lib.model import load_model_and_tokenizer

    root = tmp_path_factory.mktemp("models")
    net, tok, _ = load_model_and_tokenizer("Qwen/Qwen3-0.6B", tiny=True)
    net.save_pretrained(root / "complete")
    tok.save_pretrained(root / "complete")
    (root / "no_weights").mkdir()
    shutil.copy(root / "complete" / "config.json", root / "no_weights")
    net.save_pretrained(root / "no_tokenizer")
    (root / "custom").mkdir()
    cfg = json.loads((root / "complete" / "config.json").read_text())
    (root / "custom" / "config.json").write_text(
        json.dumps(cfg | {"model_type": "my_qwen", "auto_map": {"AutoModelForCausalLM": "modeling_my_qwen.MyQwen"}})
    )
    shutil.copy(root / "complete" / "model.safetensors", root / "custom")
    shutil.copytree(root / "complete", root / "short_positions")  # 64 positions: --max-length 128 cannot fit
    (root / "short_positions" / "config.json").write_text(json.dumps(cfg | {"max_position_embeddings": 64}))
    shutil.copytree(root / "complete", root / "empty_weights")  # a copy cut short: weights of 0 bytes
    (root / "empty_weights" / "model.safetensors").write_bytes(b"")
    shutil.copytree(root / "complete", root / "run" / "model")  # a run's folder whose model/ was cut short so
    (root / "run" / "model" / "model.safetensors").write_bytes(b"")
    (root / "pickle_weights").mkdir()  # weights in a pickle alone (torch.save), no safetensors
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(root / "complete" / f, root / "pickle_weights")
    torch.save(net.state_dict(), root / "pickle_weights" / "pytorch_model.bin")
    # transformers 4's save_pretrained(safe_serialization=False) of a larger model: pickle shards and their index
    # (transformers 5 has no such option: it takes the keyword and writes safetensors)
    shutil.copytree(root / "pickle_weights", root / "pickle_shards", ignore=shutil.ignore_patterns("*.bin"))
    state = net.state_dict()
    shards = {f"pytorch_model-0000{i + 1}-of-00002.bin": list(state)[i::2] for i in range(2)}
    for shard, keys in shards.items():
        torch.save({k: state[k] for k in keys}, root / "pickle_shards" / shard)
    index = {"metadata": {}, "weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (root / "pickle_shards" / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    net.resize_token_embeddings(1000)  # fewer embedding rows than its 4,096-token tokenizer has ids
    net.save_pretrained(root / "small_vocab")
    tok.save_pretrained(root / "small_vocab")
    return root


def data_file(tmp_path, mutate=None) -> Path:
    d = json.loads(json.dumps(SQUAD))
    if mutate:
        mutate(d["data"][0]["paragraphs"][0]["qas"][0]["answers"][0])
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(d))
    return path


def finished_run(tmp_path) -> Path:
    out = tmp_path / "done"
    out.mkdir()
    (out / "train_log.csv").write_text("step,loss\n1,8.0\n")
    rundir.write_json_atomic(out / "results.json", {"experiment": "baseline"})
    return out


def linked_dir(tmp_path) -> Path:
    """A link to a folder (its target outside the run)."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    return tmp_path / "link"


def planted_link(tmp_path) -> Path:
    """A folder whose train_log.csv is a dangling link: writing the log would create a file outside it."""
    out = tmp_path / "planted"
    out.mkdir()
    (out / "train_log.csv").symlink_to(tmp_path / "outside.csv")
    return out


def linked_file(tmp_path) -> Path:
    """A run's folder whose memory.csv links to a file of the user's (theirs.csv): a resume would append to it."""
    out = finished_run(tmp_path)
    (out / "results.json").unlink()
    (tmp_path / "theirs.csv").write_text("theirs\n")
    (out / "memory.csv").symlink_to(tmp_path / "theirs.csv")
    return out


def users_model(tmp_path) -> Path:
    """A folder of the user's holding a model/ of theirs (no run there): a run would replace it."""
    (tmp_path / "mine" / "model").mkdir(parents=True)
    (tmp_path / "mine" / "model" / "weights.bin").write_bytes(b"theirs")
    return tmp_path / "mine"


def users_scores(tmp_path) -> Path:
    """A folder of the user's holding predictions.jsonl and squad_scores.json of theirs: --score-questions writes both."""
    (tmp_path / "scores").mkdir()
    for name in ("predictions.jsonl", "squad_scores.json"):
        (tmp_path / "scores" / name).write_text("theirs")
    return tmp_path / "scores"


def beside_a_run(tmp_path) -> Path:
    """A finished run beside a user's files named like a run's (a glob of memory.*.csv once took them for its own)."""
    out = finished_run(tmp_path)
    for name in ("memory.notes.csv", "micro_batches_analysis.csv", ".analysis.tmp.py", "memory.rank1x.csv"):
        (out / name).write_text("mine")
    return out


def stringly_run(tmp_path) -> Path:
    """A killed run whose run_config.json was edited by hand: world_size "1", a string."""
    out = tmp_path / "edited"
    out.mkdir()
    rundir.write_json_atomic(out / rundir.MARKER, {"status": "running", "pid": 2**22 + 7, "host": os.uname().nodename})
    rundir.write_json_atomic(out / checkpoint.RUN_CONFIG, {"world_size": "1", "gradient_accumulation_steps": 1})
    return out


def nested_json(path: Path) -> Path:
    """A JSON file nested past Python's recursion limit (json.loads raises RecursionError)."""
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path


def sparse_file(path: Path, head: bytes, size: int) -> Path:
    """A file of `size` bytes that begins with `head`, the rest a hole (no bytes on disk)."""
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def nested_model(tmp_path) -> Path:
    (tmp_path / "deep_model").mkdir()
    nested_json(tmp_path / "deep_model" / "config.json")
    return tmp_path / "deep_model"


def readonly_dir(tmp_path) -> Path:
    if os.geteuid() == 0:  # root writes through permission bits: sysfs refuses new files even to root
        return Path("/sys/workshop-run")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / "run"


def workshop_main(argv) -> int:
    """`workshop ARGV` in this process: its exit status (argparse's own errors exit through SystemExit)."""
    try:
        return cli.main([str(a) for a in argv])
    except SystemExit as e:
        return e.code


T = "--tiny"
# (name, arguments as a function of tmp_path and the model dirs, words the message must hold)
BAD = [
    ("unknown experiment", lambda t, m: ["stage9", T], "stage2_offload"),
    ("micro-batch 0", lambda t, m: ["baseline", T, "--micro-batch-size", "0"], "train_micro_batch_size_per_gpu"),
    ("epochs 0", lambda t, m: ["baseline", T, "--epochs", "0"], "epochs must be at least 1"),
    (
        "accumulation 0",
        lambda t, m: ["baseline", T, "--gradient-accumulation-steps", "0"],
        "gradient_accumulation_steps",
    ),
    ("max-steps 0", lambda t, m: ["baseline", T, "--max-steps", "0"], "max_steps must be at least 1"),
    ("not an int", lambda t, m: ["baseline", T, "--epochs", "two"], "invalid int value"),
    ("learning rate inf", lambda t, m: ["baseline", T, "--learning-rate", "inf"], "must be finite numbers"),
    ("learning rate nan", lambda t, m: ["baseline", T, "--learning-rate", "nan"], "must be finite numbers"),
    ("weight decay -inf", lambda t, m: ["baseline", T, "--weight-decay=-inf"], "must be finite numbers"),
    ("negative seed", lambda t, m: ["baseline", T, "--seed=-1"], "seed must be between 0 and 4,294,967,295"),
    ("seed past 32 bits", lambda t, m: ["baseline", T, "--seed", str(2**32)], "seed must be between 0"),
    ("unknown option", lambda t, m: ["baseline", T, "--epoch", "2"], "unrecognized"),
    (
        "more questions than the file",
        lambda t, m: ["baseline", T, "--train-file", data_file(t), "--num-train-samples", "100000"],
        "holds 1.",
    ),
    (
        "more questions than bundled SQuAD",
        lambda t, m: ["baseline", T, "--num-train-samples", "100000"],
        "holds 11,877",
    ),
    ("train file is a directory", lambda t, m: ["baseline", T, "--train-file", t], "is a directory"),
    ("train file missing", lambda t, m: ["baseline", T, "--train-file", t / "missing.json"], "does not exist"),
    ("train file a device", lambda t, m: ["baseline", T, "--train-file", "/dev/zero"], "is not a regular file"),
    (
        "answer text null",
        lambda t, m: ["baseline", T, "--train-file", data_file(t, lambda a: a.update(text=None))],
        "answers.0.text: Input should be a valid string",
    ),
    (
        "answer text blank",
        lambda t, m: ["baseline", T, "--train-file", data_file(t, lambda a: a.update(text=" "))],
        "answers.0.text: String should match pattern",
    ),
    ("output dir is a file", lambda t, m: ["baseline", T, "--output-dir", data_file(t)], "is a file"),
    ("output dir not writable", lambda t, m: ["baseline", T, "--output-dir", readonly_dir(t)], "cannot be written"),
    ("finished run there", lambda t, m: ["baseline", T, "--output-dir", finished_run(t)], "--overwrite"),
    ("output dir empty", lambda t, m: ["baseline", T, "--output-dir", ""], "--output-dir '' is empty"),
    ("output dir the current folder", lambda t, m: ["baseline", T, "--output-dir", "."], "--output-dir '.' is /"),
    ("output dir the home folder", lambda t, m: ["baseline", T, "--output-dir", "~"], f"is {Path.home()},"),
    ("output dir the root", lambda t, m: ["baseline", T, "--overwrite", "--output-dir", "/"], "--output-dir '/' is /,"),
    (
        "a user's model/ there",
        lambda t, m: ["baseline", T, "--output-dir", users_model(t)],
        "holds model, which a run writes, but no run",
    ),
    ("output dir not UTF-8", lambda t, m: ["baseline", T, "--output-dir", f"{t}/r\udcff"], "is not UTF-8 text"),
    ("output dir name too long", lambda t, m: ["baseline", T, "--output-dir", t / ("r" * 300)], "over 255 bytes"),
    (
        "world_size a string in run_config.json, resumed",
        lambda t, m: ["baseline", T, "--resume", "--output-dir", stringly_run(t)],
        "its world_size is '1', not a whole number",
    ),
    (
        "a user's model/ there, resumed",
        lambda t, m: ["baseline", T, "--resume", "--output-dir", users_model(t)],
        "holds model, which a run writes, but no run",
    ),
    (
        "a user's scores there, resumed",
        lambda t, m: ["baseline", T, "--resume", "--score-questions", "2", "--output-dir", users_scores(t)],
        "holds predictions.jsonl, squad_scores.json, which a run writes, but no run",
    ),
    (
        "a user's files named like a run's, overwritten",
        lambda t, m: ["baseline", T, "--overwrite", "--output-dir", beside_a_run(t)],
        "no run writes (.analysis.tmp.py, memory.notes.csv, memory.rank1x.csv, micro_batches_analysis.csv)",
    ),
    (
        "train file nested too deep",
        lambda t, m: ["baseline", T, "--train-file", nested_json(t / "deep.json")],
        "is not valid JSON (maximum recursion depth",
    ),
    (
        "model config nested too deep",
        lambda t, m: ["baseline", "--allow-cpu", "--model", nested_model(t)],
        "is not a valid model config (maximum recursion depth",
    ),
    ("output dir a link", lambda t, m: ["baseline", T, "--output-dir", linked_dir(t)], "never writes through a link"),
    (
        "a link among the run's files",
        lambda t, m: ["baseline", T, "--overwrite", "--output-dir", planted_link(t)],
        "never writes through a link",
    ),
    (
        "output dir a link, overwritten",
        lambda t, m: ["baseline", T, "--overwrite", "--output-dir", linked_dir(t)],
        "never writes through a link",
    ),
    (
        "a link to a user's file, resumed",
        lambda t, m: ["baseline", T, "--resume", "--output-dir", linked_file(t)],
        "never writes through a link",
    ),
    ("model path missing", lambda t, m: ["baseline", "--model", t / "nonexistent"], "does not exist"),
    ("model path missing, tiny", lambda t, m: ["baseline", T, "--model", t / "nonexistent"], "does not exist"),
    ("model without weights", lambda t, m: ["baseline", "--allow-cpu", "--model", m / "no_weights"], "no weights"),
    (
        "model without tokenizer",
        lambda t, m: ["baseline", "--allow-cpu", "--model", m / "no_tokenizer"],
        "no tokenizer",
    ),
    ("model with custom code", lambda t, m: ["baseline", "--allow-cpu", "--model", m / "custom"], "trust_remote_code"),
    (
        "model with pickle weights only",
        lambda t, m: ["baseline", "--allow-cpu", "--model", m / "pickle_weights", "--max-steps", "1"],
        "pytorch_model.bin",
    ),
    (
        "model with pickle shards only",
        lambda t, m: ["baseline", "--allow-cpu", "--model", m / "pickle_shards", "--max-steps", "1"],
        "only as a pickle (pytorch_model-00001-of-00002.bin, pytorch_model-00002-of-00002.bin)",
    ),
    (
        "train file of 1 GiB",
        lambda t, m: ["baseline", T, "--train-file", sparse_file(t / "huge.json", b'{"data": [', 2**30)],
        "holds 1,024 MiB",
    ),
    (
        "train file not JSON",
        lambda t, m: ["baseline", T, "--train-file", sparse_file(t / "squad.csv", b"id,question,context\n", 2**30)],
        "is not a SQuAD JSON file",
    ),
    (
        "model with empty weights",
        lambda t, m: ["baseline", "--allow-cpu", "--model", m / "empty_weights"],
        "weights that are empty or cannot be read: model.safetensors",
    ),
    (
        "max length past the positions",
        lambda t, m: ["baseline", "--allow-cpu", "--model", m / "short_positions", "--max-length", "128"],
        "has 64 positions",
    ),
    (
        "vocabulary below the tokenizer",
        lambda t, m: ["baseline", "--allow-cpu", "--model", m / "small_vocab"],
        "embedding has 1,000 rows",
    ),
    (
        "hub model not cached",
        lambda t, m: ["baseline", "--allow-cpu", "--model", "no-such-org/no-such-model"],
        "hf download no-such-org/no-such-model",
    ),
]


@pytest.mark.parametrize("name, args, expected", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_a_fix_and_changes_nothing(
    name, args, expected, tmp_path, model_dirs, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the default output directory, runs/..., would be created here
    argv = [str(a) for a in args(tmp_path, model_dirs)]
    if "--output-dir" not in argv:
        argv += ["--output-dir", str(tmp_path / "out")]
    out = Path(argv[argv.index("--output-dir") + 1]).expanduser().absolute()
    # "/", "~" or a name too long to look at: what the test made is what it watches
    out = out if out.is_relative_to(tmp_path) and len(out.name) < 256 else tmp_path
    before = snapshot(out)
    rc = workshop_main(["run", *argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert expected in err and "To fix:" in err and "Traceback" not in err, err
    assert snapshot(out) == before and not (tmp_path / "runs").exists()
    assert not (tmp_path / "outside.csv").exists()  # nothing written through a planted link
    assert not (tmp_path / "theirs.csv").exists() or (tmp_path / "theirs.csv").read_text() == "theirs\n"
    if "nonexistent" in str(argv):
        assert "download" not in err and "add --tiny" not in err, err  # no hub advice for a local path


@pytest.mark.slow
@pytest.mark.parametrize("case", ["a link among the run's files", "train file nested too deep"])
def test_refusals_hold_on_2_cpu_ranks(case, tmp_path, model_dirs):
    """The bad-input table's refusals under torchrun with 2 gloo ranks (an output and an input, each ~10 s): a rank
    ends with the one message and its fix, no rank with a traceback, and nothing is written, behind a link included.
    A rank that has not refused yet when another has may end silent: torchrun stops the others once one exits
    (seen in CI: one rank's stderr empty)."""
    argv = [str(a) for a in next(b for b in BAD if b[0] == case)[1](tmp_path, model_dirs)]
    argv += [] if "--output-dir" in argv else ["--output-dir", str(tmp_path / "out")]
    out = Path(argv[argv.index("--output-dir") + 1])
    before = snapshot(out)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "--log-dir",
            str(tmp_path / "logs"),
            "--redirects",
            "3",
            "-m",
            "workshop_lib.cli",
            "run",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=os.environ | {"CUDA_VISIBLE_DEVICES": ""},
    )
    errs = [f.read_text() for f in sorted((tmp_path / "logs").glob("**/attempt_0/*/stderr.log"))]
    assert p.returncode != 0 and len(errs) == 2, p.stderr[-2000:]
    expected = next(b for b in BAD if b[0] == case)[2]
    assert any(expected in err and "To fix:" in err for err in errs), errs
    for err in errs:  # each rank refused with the one message, or was stopped by torchrun before it could
        assert (expected in err and "To fix:" in err or not err.strip()) and "Traceback" not in err, err[-3000:]
    assert snapshot(out) == before and not (tmp_path / "outside.csv").exists()


@pytest.mark.parametrize("value", ["2", "abc"])
def test_a_bad_gpu_memory_fraction_is_refused_before_the_run(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKSHOP_GPU_MEMORY_FRACTION", value)
    assert workshop_main(["run", "baseline", "--tiny", "--output-dir", tmp_path / "out"]) == 2
    err = capsys.readouterr().err
    assert "WORKSHOP_GPU_MEMORY_FRACTION" in err and "To fix:" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_report_refuses_a_missing_path_and_flags_unfinished_runs(tmp_path, capsys):
    assert workshop_main(["report", tmp_path / "nope"]) == 2
    assert "does not exist" in capsys.readouterr().err
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "train_log.csv").write_text("step,loss\n")
    rundir.write_json_atomic(
        killed / rundir.MARKER,
        {"status": "running", "pid": 2**22 + 7, "host": os.uname().nodename, "started": "2026-11-22T03:00:00"},
    )
    assert workshop_main(["report", tmp_path]) == 2
    err = capsys.readouterr().err
    assert f"skipped {killed}: a run whose process is gone (killed)" in err and "No finished run" in err


def test_report_leaves_out_a_results_json_whose_figures_are_not_numbers(tmp_path, capsys):
    """A results.json edited by hand (world_size "x"): named and left out, as a damaged one is; nothing written (it
    was a traceback after writing part of --out)."""
    out = finished_run(tmp_path)
    rundir.write_json_atomic(out / "results.json", {"experiment": "baseline", "world_size": "x"})
    assert workshop_main(["report", out, "--out", tmp_path / "report"]) == 2
    err = capsys.readouterr().err
    assert "its world_size is 'x', not a number" in err and err.count("To fix:") == 1 and "Traceback" not in err
    assert not (tmp_path / "report").exists()


def test_report_never_writes_through_a_link(tmp_path, capsys):
    out = tmp_path / "report"
    out.mkdir()
    (tmp_path / "mine.md").write_text("mine")
    (out / "report.md").symlink_to(tmp_path / "mine.md")
    assert workshop_main(["report", finished_run(tmp_path), "--out", out]) == 2
    err = capsys.readouterr().err
    assert "never writes through a link" in err and "To fix: remove that link" in err, err
    assert (tmp_path / "mine.md").read_text() == "mine" and sorted(out.iterdir()) == [out / "report.md"]


@pytest.mark.parametrize("name", ["report.md", "memory_over_time.png", "memory.csv", "train_log.csv"])
def test_a_link_planted_after_the_checks_is_not_followed(tmp_path, monkeypatch, name):
    """The race `rundir.refuse_links` cannot see, a link planted after it looked (here: it looks at nothing): each
    file written in place (the report's, memory.csv, train_log.csv) is opened with O_NOFOLLOW (`rundir.no_link`),
    so the write fails and the file behind the link stays as it was."""
    from types import SimpleNamespace

    from workshop_lib.callbacks import StepLog
    from workshop_lib.memory import MemorySampler

    monkeypatch.setattr(rundir, "refuse_links", lambda *a: None)
    out, mine = tmp_path / "out", tmp_path / "mine"
    out.mkdir()
    mine.write_text("mine")
    (out / name).symlink_to(mine)
    if name == "memory.csv":
        with pytest.raises(OSError), MemorySampler(out / name):  # the sampler's error, raised as it ends
            pass
    elif name == "train_log.csv":
        with pytest.raises(OSError):
            StepLog(out / name, 0.0).on_train_begin(
                None, SimpleNamespace(num_input_tokens_seen=0, global_step=0, is_world_process_zero=True), None
            )
    else:
        import workshop_lessons as lessons

        run = shutil.copytree(lessons.REFERENCE / "h100" / "runs" / "Qwen3-0.6B-default-stage2", tmp_path / "run")
        with pytest.raises(OSError):
            results.write_report([run], out)
    assert mine.read_text() == "mine" and (out / name).is_symlink()


def test_a_killed_runs_directory_is_refused_until_overwrite_or_resume(tmp_path):
    out = tmp_path / "killed"
    out.mkdir()
    rundir.write_json_atomic(
        out / rundir.MARKER,
        {"status": "running", "pid": 2**22 + 7, "host": os.uname().nodename, "started": "2026-11-22T03:00:00"},
    )
    with pytest.raises(WorkshopError, match="process is gone.*\nTo fix: pass --resume to continue it"):
        rundir.check(out, overwrite=False)
    rundir.check(out, overwrite=True)
    rundir.check(out, overwrite=False, resume=True)
    rundir.write_json_atomic(
        out / rundir.MARKER,
        {"status": "running", "pid": os.getpid(), "host": os.uname().nodename, "started": "2026-11-22T03:00:00"},
    )
    with pytest.raises(WorkshopError, match="still in progress"):  # a live run is never removed
        rundir.check(out, overwrite=True)


def test_overwrite_removes_the_runs_files_and_refuses_a_folder_holding_anything_else(tmp_path, capsys):
    """--overwrite removes what a run wrote (`rundir.RUN_OUTPUTS`) and keeps the set-aside checkpoints; a run's folder
    that also holds a user's files is refused, naming them, with every file untouched."""
    out = finished_run(tmp_path)
    for rel in (
        "model/model.safetensors",
        "checkpoints/checkpoint-4/latest",
        "predictions.jsonl",
        "comms.json",
        "memory.rank1.csv",
        "micro_batches.rank1.csv",
        "memory.rank1.before-resume-at-step-2.csv",
        ".results.json.tmp4242",
        f"{rundir.DAMAGED}/checkpoint-2/latest",
    ):  # comms.json once reached the next run
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text("the run's")
    (out / "mycode").mkdir()
    (out / "mycode" / "train.py").write_text("print('mine')")
    (out / "thesis.txt").write_text("mine")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with pytest.raises(WorkshopError, match=r"(?s)no run writes \(mycode, thesis.txt\).*To fix: move those files"):
        rundir.claim(out, overwrite=True)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert (out / "thesis.txt").read_text() == "mine" and (out / "mycode" / "train.py").read_text() == "print('mine')"
    shutil.rmtree(out / "mycode"), (out / "thesis.txt").unlink()
    rundir.claim(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [rundir.MARKER, rundir.DAMAGED]
    assert "Removed the previous run's files" in capsys.readouterr().out


def test_a_resume_keeps_the_memory_logs_of_the_run_and_leaves_a_users_alone(tmp_path, capsys):
    """A resume renames the interrupted attempt's memory logs (memory[.rankN].csv) to keep them, and only those."""
    for name in ("memory.csv", "memory.rank1.csv", "memory_notes.csv", "memory.mine.csv"):
        (tmp_path / name).write_text(name)
    checkpoint.resume_point(tmp_path, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "memory.before-resume-at-step-0.csv",
        "memory.mine.csv",
        "memory.rank1.before-resume-at-step-0.csv",
        "memory_notes.csv",
    ]


@pytest.mark.slow
def test_a_resume_refuses_a_changed_data_file_and_keeps_the_train_logs_columns(tmp_path):
    """run_config.json records the data's SHA-256: a resume on a file changed under the same path is refused, naming
    it, with nothing changed; on the file it started with it continues, and train_log.csv keeps every column."""
    data = tmp_path / "train.json"
    shutil.copy(ROOT / "workshop_lib" / "squad" / "train-v1.1-subset.json", data)
    out = tmp_path / "run"
    args = ["run", "baseline", "--tiny", "--max-steps", "2", "--save-strategy", "steps", "--save-steps", "1"]
    args += ["--train-file", data, "--output-dir", out]
    workshop(*args)
    (out / "results.json").unlink()  # as if stopped after checkpoint-1
    shutil.rmtree(out / checkpoint.CHECKPOINTS / "checkpoint-2")
    log = pd.read_csv(out / "train_log.csv").assign(note="mine")
    log.to_csv(out / "train_log.csv", index=False)
    original = data.read_bytes()
    d = json.loads(original)
    d["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Another question?"
    data.write_text(json.dumps(d))
    before = snapshot(out)
    p = workshop(*args, "--resume", check=False)
    assert p.returncode == 2 and "train_file_sha256" in p.stderr and "To fix: " in p.stderr, p.stderr[-2000:]
    assert snapshot(out) == before
    data.write_bytes(original)
    workshop(*args, "--resume")
    log = pd.read_csv(out / "train_log.csv")
    assert sorted(set(log["step"])) == [1, 2] and list(log[log["step"] == 1]["note"]) == ["mine"], log
    assert log[log["step"] == 2]["note"].isna().all()


@pytest.mark.slow
def test_export_follows_no_link_in_the_checkpoint_or_at_its_destination(tmp_path):
    """A ZeRO checkpoint whose special_tokens_map.json links to a user's file, and an OUT that is a link to an empty
    folder: both refused before any work, with the fix, and nothing written (the link's target not copied in)."""
    run = tmp_path / "run"
    workshop("run", "stage2", "--tiny", "--max-steps", "1", "--save-strategy", "steps", "--save-steps", "1",
             "--save-model", "false", "--output-dir", run)  # fmt: skip
    ckpt = checkpoint.find_checkpoints(run)[0][-1]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    p = workshop("export", run, tmp_path / "link", check=False)
    assert p.returncode == 2 and "never writes through a link" in p.stderr and "To fix:" in p.stderr, p.stderr
    assert not any((tmp_path / "elsewhere").iterdir())
    (tmp_path / "secret.json").write_text('{"mine": 1}')
    (ckpt / "special_tokens_map.json").unlink(missing_ok=True)
    (ckpt / "special_tokens_map.json").symlink_to(tmp_path / "secret.json")
    p = workshop("export", run, tmp_path / "out", check=False)
    assert p.returncode == 2 and "special_tokens_map.json" in p.stderr and "To fix:" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_report_over_many_runs_draws_a_bounded_memory_figure(tmp_path):
    """One memory panel per run made `workshop report` over 1,000 runs take over 40 minutes (matplotlib's layout of
    1,000 panels); the figure shows the first `results.MAX_PANELS` and says so, the table keeps every run."""
    workshop("run", "baseline", "--tiny", "--max-steps", "1", "--save-strategy", "no", "--save-model", "false",
             "--output-dir", tmp_path / "runs" / "r0")  # fmt: skip
    for i in range(1, results.MAX_PANELS + 6):
        shutil.copytree(tmp_path / "runs" / "r0", tmp_path / "runs" / f"r{i}")
    (tmp_path / "runs" / "r1" / "memory.csv").write_text("a,b\n1,2\n")  # another layout: a traceback once
    df = results.load_results([tmp_path / "runs"])
    fig = results.plot_memory_over_time(df)
    assert "baseline (r1): no readable memory.csv" in [ax.get_title() for ax in fig.axes]
    assert len(df) == results.MAX_PANELS + 6 and sum(ax.get_visible() for ax in fig.axes) == results.MAX_PANELS
    assert f"the first {results.MAX_PANELS} of {len(df)} runs" in fig._suptitle.get_text()


@pytest.mark.parametrize("value", ["0", "100000000000000000000"])
def test_a_dist_timeout_out_of_range_is_refused_before_the_run(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORKSHOP_DIST_TIMEOUT_S", value)
    assert workshop_main(["run", "baseline", "--tiny", "--output-dir", tmp_path / "out"]) == 2
    err = capsys.readouterr().err
    assert "is not from 1 to 1,000,000 seconds" in err and "To fix:" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_export_onto_a_disk_too_small_for_the_model_ends_in_one_message(tmp_path):
    """A 1 MiB tmpfs, less than the tiny model's 1.3 MiB of fp32 weights: safetensors' own error (a traceback once)
    becomes one message with the fix, and nothing is left on the disk."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        workshop("run", "stage2", "--tiny", "--max-steps", "1", "--save-strategy", "steps", "--save-steps", "1",
                 "--save-model", "false", "--output-dir", tmp_path / "run")  # fmt: skip
        p = workshop("export", tmp_path / "run", disk / "out", check=False)
        assert p.returncode == 2 and "No space left on device" in p.stderr, p.stderr[-2000:]
        assert p.stderr.count("To fix:") == 1 and "Traceback" not in p.stderr and not list(disk.iterdir())
    finally:
        subprocess.run(["umount", "-l", disk], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("given", ["--output-dir=~/x", "output_dir='~/x'"])
def test_a_tilde_in_the_output_dir_is_one_folder_for_the_workshop_and_the_trainer(given, tmp_path):
    """`~` the shell left (`--output-dir=~/x`, or from Python) is expanded once: the run's files, its checkpoints
    and a --resume all see $HOME/x; no folder named `~` appears."""
    env = {"HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    args = ["baseline", "--tiny", "--max-steps", "1", "--save-strategy", "steps", "--save-steps", "1"]
    if given.startswith("--"):
        p = workshop("run", *args, given, cwd=tmp_path, env=env, check=False)
    else:
        code = f"from workshop_lib.train import run_experiment; run_experiment('baseline', tiny=True, {given}, "
        cmd = [sys.executable, "-c", code + "max_steps=1, save_strategy='steps', save_steps=1)"]
        p = subprocess.run(cmd, cwd=tmp_path, env=os.environ | env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    out = tmp_path / "home" / "x"
    assert (out / "results.json").is_file() and checkpoint.find_checkpoints(out)[0], sorted(os.listdir(out))
    assert not (tmp_path / "~").exists()
    if given.startswith("--"):
        assert f"wrote {out / 'results.json'}" in p.stdout


def test_a_marker_whose_pid_now_belongs_to_another_program_counts_as_dead(tmp_path):
    """The marker records its process's start (psutil's create_time). A live process with that pid that started
    at another time reused the pid after the run died: the run counts as killed (resumable), not in progress.
    The same pid with its own start time is the run itself, alive; and the refusal says how to clear a marker."""
    import psutil

    out = tmp_path / "run"
    out.mkdir()
    me = psutil.Process()
    marker = {"status": "running", "pid": me.pid, "host": os.uname().nodename, "started": "2026-11-22T03:00:00"}
    rundir.write_json_atomic(out / rundir.MARKER, marker | {"pid_created": me.create_time() - 3600})
    assert "process is gone" in rundir.describe_unfinished(rundir.state(out)[1])
    rundir.check(out, overwrite=False, resume=True)  # resumable: the pid is another program now
    rundir.write_json_atomic(out / rundir.MARKER, marker | {"pid_created": me.create_time()})
    with pytest.raises(
        WorkshopError, match=f"still in progress.*\nTo fix: .*kill {me.pid}.*remove {out / rundir.MARKER}"
    ):
        rundir.check(out, overwrite=False, resume=True)


def test_a_stale_op_build_lock_is_named_at_once_and_a_live_build_is_waited_for(tmp_path, capsys):
    """torch's build lock records no owner. Where no process works in the lock's folder (torch runs ninja there),
    the lock is a killed build's: named with the fix at once (issue 40: it was after 600 s). Where one does, the
    wait says what it waits for and ends when the lock goes, or with the fix after its timeout."""
    lock = tmp_path / "lock"
    lock.touch()
    t0 = time.monotonic()
    with pytest.raises(WorkshopError, match=f"no process is building there.*\nTo fix: .*rm {lock}"):
        env.wait_for_file_lock(lock, "DeepSpeed's cpu_adam op", timeout_s=600, notice_after_s=0.3, poll_s=0.1)
    assert time.monotonic() - t0 < 300 and "Waiting" not in capsys.readouterr().out  # not the 600 s time-out
    build = subprocess.Popen(["sleep", "3600"], cwd=tmp_path)  # a build in progress, as ninja is
    try:
        with pytest.raises(WorkshopError, match=f"(?s)has blocked the build of DeepSpeed's cpu_adam op.*rm {lock}"):
            env.wait_for_file_lock(lock, "DeepSpeed's cpu_adam op", timeout_s=1.0, notice_after_s=0.3, poll_s=0.1)
        assert f"Waiting for {lock}: another process is building DeepSpeed's cpu_adam op" in capsys.readouterr().out
        threading.Timer(0.5, lock.unlink).start()  # the build ends and releases its lock
        env.wait_for_file_lock(lock, "DeepSpeed's cpu_adam op", timeout_s=600, notice_after_s=0.3, poll_s=0.1)
    finally:
        build.kill()
        build.wait()


@pytest.mark.slow
def test_a_cached_op_loads_in_a_new_process_without_a_compile_message():
    """Issue 59 item 10: "Compiling DeepSpeed's ... op" was printed by runs where nothing compiled (a 3-second timer
    on a busy machine). It is printed only where the op's build folder holds no library yet, by no clock: a new
    process that loads the built op says nothing of compiling, however long its load takes."""
    code = "from workshop_lib import env; env.build_deepspeed_ops(['FusedAdamBuilder'])"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=HANG_S)  # built here if not yet
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=HANG_S)
    assert "Compiling" not in again.stdout + again.stderr, again.stdout + again.stderr


def test_config_resolves_from_the_recipe_and_the_command_line():
    cfg = resolve(
        parse_run_args(["stage2", "--tiny", "--micro-batch-size", "8", "--recipe", "classic", "--output-dir", "/tmp/x"])
    )
    assert (cfg.train_micro_batch_size_per_gpu, cfg.gradient_accumulation_steps, cfg.padding, cfg.precision) == (
        8,
        4,
        "max_length",
        "fp16",
    )
    assert (cfg.num_train_samples, cfg.epochs, cfg.learning_rate) == (64, 2, 1e-3)  # --tiny's
    assert resolve(RunConfig("stage3_offload", epochs=1)).output_dir.startswith("runs/stage3_offload-")
    assert {e.offload_optimizer for e in EXPERIMENTS.values()} == {"none", "cpu"}


def test_recipes_are_overlays_of_the_run_configs_own_fields():
    """A recipe names only RunConfig fields; a setting it leaves out takes the field's base; every overlay the
    library, the notebooks and the lab's benchmark pass is checked against RunConfig's fields and types."""
    from lab import bench
    from workshop_lessons import COURSE_RUNS, QUARTER, large_models
    from workshop_lib import config

    classic, default = config.recipe_settings("classic"), config.recipe_settings("default")
    assert set(classic) == set(default) == set(config.RECIPE_FIELDS)
    assert classic["max_length"] == config.BASE["max_length"] == 512  # classic leaves it out
    assert config.recipe_settings("default", tiny=True)["num_train_samples"] == config.TINY["num_train_samples"]
    assert "padding" in config.RunConfig.__dataclass_fields__ and not hasattr(config, "Recipe")
    overlays = {"bench.BEFORE": bench.BEFORE, "large_models.LARGE": large_models.LARGE}
    # less the lab's own `liger` (Liger-Kernel's kernels, applied by the benchmark)
    overlays |= {
        f"bench {label}": {k: v for k, v in fields.items() if k != "liger"} for label, fields in bench.VARIANTS
    }
    overlays |= {
        f"{nb}/{run}": {k: v for k, v in settings.items() if v != QUARTER}
        for nb, runs in COURSE_RUNS.items()
        for run, (_, settings) in runs.items()
    }
    for where, settings in overlays.items():
        assert config.check_overlay(settings, where) is settings
    with pytest.raises(WorkshopError, match=r"recipe 'x': 'paddding' is not a recipe setting"):
        config.check_overlay({"paddding": "longest"}, "recipe 'x'", recipe_only=True)
    with pytest.raises(WorkshopError, match="'output_dir' is not a recipe setting"):
        config.check_overlay({"output_dir": "runs"}, "TINY", recipe_only=True)
    with pytest.raises(WorkshopError, match="padding must be 'longest' or 'max_length', got 'maxlen'"):
        config.check_overlay({"padding": "maxlen"}, "a notebook")
    with pytest.raises(WorkshopError, match="max_length must be a valid integer, got '512'"):
        config.check_overlay({"max_length": "512"}, "a notebook")
    with pytest.raises(WorkshopError, match="drop_attention_mask must be a valid boolean, got 1"):
        config.check_overlay({"drop_attention_mask": 1}, "a notebook")
    # a notebook's RunConfig is checked the same way when it resolves, before anything is written
    with pytest.raises(WorkshopError, match=r"(?s)RunConfig: padding must be 'longest' .*To fix: set padding"):
        resolve(RunConfig("stage2", padding="maxlen", output_dir="/tmp/x"))
    with pytest.raises(WorkshopError, match=r"Unknown recipe 'clasic'"):
        resolve(RunConfig("stage2", recipe="clasic", output_dir="/tmp/x"))


def test_a_run_config_round_trips_through_its_command_line():
    cfg = RunConfig(
        "stage3_offload",
        tiny=True,
        random_weights=True,
        max_steps=24,
        save_strategy="steps",
        save_steps=1,
        output_dir="/tmp/x y",
        overwrite=True,
        activation_checkpointing=False,
        learning_rate=1e-2,
        ds_config=["zero_optimization.overlap_comm=false", "steps_per_print=5"],
    )
    argv = cli_args(cfg)
    assert argv[:1] == ["stage3_offload"] and argv.count("--ds-config") == 2
    assert parse_run_args(argv) == cfg
    assert parse_run_args(cli_args(RunConfig("baseline"))) == RunConfig("baseline")


def test_notebook_03b_writes_few_checkpoints_and_knows_their_size_first():
    from workshop_lessons import fine_tuned

    assert fine_tuned.SAVES == 1 and fine_tuned.save_settings(24) == {"save_strategy": "steps", "save_steps": 24}
    assert fine_tuned.save_settings(None) == {"save_strategy": "epoch"}
    n = 596_049_920  # Qwen3-0.6B
    gpu, cpu = fine_tuned.checkpoint_plan(n, "bf16", 24, 3), fine_tuned.checkpoint_plan(n, "fp32", None, 3)
    assert (gpu.bytes_per_param, cpu.bytes_per_param) == (14, 16)
    # the uninterrupted and the resumed run one each, the killed one until its second and one half written
    assert (gpu.written, gpu.kept, cpu.written, cpu.kept) == (1 + 1 + 2 + 1, 1 + 2, 3 + 3 + 2 + 1, 2 + 2)
    assert gpu.written_mib == pytest.approx(5 * n * 14 / 2**20)
    assert gpu.kept_mib == pytest.approx((3 * 14 + 3 * 2 + 4) * n / 2**20)  # 3 checkpoints, 3 model/, the export


def _wait_for_training(out: Path, proc, timeout=HANG_S):
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        log = out / "train_log.csv"
        if (out / rundir.MARKER).exists() and log.exists() and len(log.read_text().splitlines()) > 1:  # a step
            return
        time.sleep(0.2)
    raise AssertionError(f"training never started: {proc.communicate()}")


@pytest.mark.slow
def test_sigint_ends_the_run_with_one_line_and_overwrite_replaces_it_whole(tmp_path):
    """SIGINT (Ctrl-C) mid-training, in an --overwrite run over a finished one: the old results are gone
    (never mixed with the new logs), the new logs kept, the directory marked unfinished, `workshop report`
    skips it, and a plain rerun is refused."""
    sig, code = signal.SIGINT, 130
    out = finished_run(tmp_path)
    proc = Workshop(
        "run", "baseline", "--tiny", "--max-steps", 100000, "--output-dir", out, "--overwrite", cwd=tmp_path
    )
    _wait_for_training(out, proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=HANG_S)
    assert proc.returncode == code, stderr[-2000:]
    assert "Traceback" not in stderr
    last = [ln for ln in stderr.splitlines() if "workshop:" in ln]
    assert len(last) == 1 and last[0].startswith(f"workshop: stopped by {sig.name} at step"), stderr[-2000:]
    assert "--overwrite" in last[0] and "Removed the previous run" in stdout
    assert not (out / "results.json").exists() and (out / "train_log.csv").exists()
    marker = json.loads((out / rundir.MARKER).read_text())
    assert marker["status"] == "interrupted" and marker["signal"] == sig.name and marker["step"] >= 1
    p = workshop("run", "baseline", "--tiny", "--output-dir", out, check=False)
    assert p.returncode == 2 and f"stopped by {sig.name}" in p.stderr and "--overwrite" in p.stderr
    p = workshop("report", tmp_path, check=False)
    assert p.returncode == 2 and f"skipped {out}" in p.stderr


@pytest.mark.slow
def test_sigterm_checkpoints_at_the_next_step_and_exits_75(tmp_path):
    """SIGTERM (SLURM's time limit, a preemption) mid-training: a complete checkpoint at the step it
    stopped at, one line saying how to continue, exit status 75, the directory marked preempted; a plain
    rerun is refused and points to --resume."""
    out = tmp_path / "run"
    proc = Workshop(
        "run", "baseline", "--tiny", "--max-steps", 100000, "--save-strategy", "no", "--output-dir", out, cwd=tmp_path
    )
    _wait_for_training(out, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=HANG_S)
    assert proc.returncode == rundir.EXIT_PREEMPTED == 75, stderr[-2000:]
    last = [ln for ln in stderr.splitlines() if "workshop:" in ln]
    assert len(last) == 1 and last[0].startswith("workshop: stopped by SIGTERM at step") and "--resume" in last[0]
    marker = json.loads((out / rundir.MARKER).read_text())
    assert marker["status"] == "preempted" and marker["step"] >= 1
    assert checkpoint.find_checkpoints(out) == ([out / "checkpoints" / f"checkpoint-{marker['step']}"], [])
    p = workshop("run", "baseline", "--tiny", "--output-dir", out, check=False)
    assert p.returncode == 2 and "with a checkpoint at step" in p.stderr and "--resume" in p.stderr


def kill_rank_1(tmp_path, when: str, *args) -> tuple[str, str]:
    """`workshop run stage2 --tiny ARGS` on 2 gloo ranks under torchrun, rank 1 sent kill -9 at `when`
    (tests/faults.py): torchrun's stderr and rank 0's."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "--log-dir",
        tmp_path / "logs",
        "--redirects",
        "3",
        Path(__file__).with_name("faults.py"),
        when,
        "KILL@1",
        "run",
        "stage2",
        "--tiny",
        *args,
        "--output-dir",
        tmp_path / "run",
    ]
    p = subprocess.run(
        list(map(str, cmd)),
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=os.environ | {"CUDA_VISIBLE_DEVICES": ""},
    )
    return p.stderr, next((tmp_path / "logs").glob("**/attempt_0/0/stderr.log")).read_text()


@pytest.mark.slow
def test_a_peer_rank_killed_mid_training_leaves_the_run_resumable(tmp_path):
    """kill -9 of rank 1 at its first epoch's last step (tests/faults.py KILL@1; a checkpoint every step), real gloo
    ranks under torchrun (~20 s on 2 cores): torchrun's summary names rank 1's -9; rank 0 stops too and marks the
    folder ended (never running nor finished), the complete checkpoints stay, and --resume takes it (issue 38)."""
    out = tmp_path / "run"
    launcher, err = kill_rank_1(tmp_path, "step_end", "--save-strategy", "steps", "--save-steps", "1")
    assert "exitcode  : -9" in launcher, launcher[-3000:]
    marker = json.loads((out / rundir.MARKER).read_text())
    assert marker["status"] in ("failed", "interrupted", "preempted") and not (out / "results.json").exists(), marker
    assert checkpoint.find_checkpoints(out)[0], err[-3000:]  # the complete checkpoints kept
    rundir.check(out, overwrite=False, resume=True)  # resumable; a plain rerun is refused
    with pytest.raises(WorkshopError, match="--resume"):
        rundir.check(out, overwrite=False)


def test_a_resume_keeps_the_runs_settings_and_its_number_of_ranks(tmp_path):
    """A resume may change only `checkpoint.MAY_CHANGE` (a setting added since the run started passes at its base
    value); on another number of ranks it is refused first, with its own fix, even where the accumulation would
    keep the global batch: a ZeRO checkpoint loads on the ranks that wrote it."""
    cfg = {"experiment": "stage2", "recipe": "default", "save_steps": 10, "gradient_accumulation_steps": 1}
    checkpoint.write_run_config(tmp_path, cfg, world_size=2)
    checkpoint.check_same_run(tmp_path, cfg | {"save_steps": 5}, world_size=2)  # how often to save may change
    checkpoint.check_same_run(tmp_path, cfg | {"max_grad_norm": 1.0, "torch_compile_zero3": False}, world_size=2)
    with pytest.raises(WorkshopError, match="max_grad_norm 1.0 then, 0.0 now"):
        checkpoint.check_same_run(tmp_path, cfg | {"max_grad_norm": 0.0}, world_size=2)
    with pytest.raises(WorkshopError, match="gradient_accumulation_steps 1 then, 2 now"):
        checkpoint.check_same_run(tmp_path, cfg | {"gradient_accumulation_steps": 2}, world_size=2)
    for world_size, accumulation in ((1, 2), (1, 1), (4, 1)):
        with pytest.raises(WorkshopError) as e:
            checkpoint.check_same_run(tmp_path, cfg | {"gradient_accumulation_steps": accumulation}, world_size)
        assert f"a run on 2 rank(s), and this resume has {world_size}" in str(e.value)
        assert str(e.value).endswith("To fix: resume with the same number of GPUs (2), or start a new run")
    checkpoint.check_same_run(tmp_path / "none", cfg, world_size=3)  # nothing to compare: no run_config.json


@pytest.mark.slow
def test_kill_9_leaves_a_marker_that_names_the_dead_process(tmp_path):
    out = tmp_path / "run"
    proc = Workshop("run", "baseline", "--tiny", "--max-steps", 100000, "--output-dir", out, cwd=tmp_path)
    _wait_for_training(out, proc)
    proc.kill()
    proc.wait()
    with pytest.raises(
        WorkshopError, match=f"pid {proc.pid} .*whose process is gone|whose process is gone.*pid {proc.pid}"
    ):
        rundir.check(out, overwrite=False)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["export", "{t}/missing", "{t}/out"], "does not exist"),
        (["export", "{t}", "{t}/out"], "holds no complete checkpoint"),
        (["eval", "{t}/missing"], "does not exist"),
        (["eval", "{t}", "--num-questions", "0"], "num_questions must be at least 1"),
        (["eval", "{m}/run", "--output-dir", "{t}/scores"], "weights that are empty or cannot be read"),
        (["eval", "{m}/pickle_weights", "--output-dir", "{t}/scores"], "only as a pickle (pytorch_model.bin)"),
    ],
    ids=[
        "export missing",
        "export no checkpoint",
        "eval missing",
        "eval 0 questions",
        "eval of a run whose weights are 0 bytes",
        "eval of a model whose weights are a pickle",
    ],
)
def test_export_and_eval_refuse_bad_input_and_write_nothing(argv, expected, tmp_path, model_dirs, capsys):
    before = snapshot(tmp_path)
    assert workshop_main([a.format(t=tmp_path, m=model_dirs) for a in argv]) == 2
    err = capsys.readouterr().err
    assert expected in err and "To fix:" in err and "Traceback" not in err, err
    assert snapshot(tmp_path) == before


def test_a_data_file_of_1_gib_is_refused_by_run_and_eval_before_it_is_read(tmp_path, model_dirs, capsys):
    """An --eval-file of 1 GiB (JSON Lines: SQuAD rows one a line, then a hole), given to `workshop run` and to
    `workshop eval`: exit 2, one message with its fix, nothing written, the file never read (`data.check_squad_path`:
    before it, on a 2-core machine, a valid 1 GiB SQuAD file took 170-190 s and 13.7 GiB of memory to score or train
    on; this one, 2.6 GiB to be called not JSON)."""
    row = {"id": "a", "question": "What is the capital?", "context": SQUAD["data"][0]["paragraphs"][0]["context"]}
    huge = sparse_file(tmp_path / "huge.jsonl", json.dumps(row).encode() + b"\n", 2**30)
    for argv in (
        ["run", "baseline", T, "--eval-file", huge, "--output-dir", tmp_path / "out"],
        ["eval", model_dirs / "complete", "--eval-file", huge, "--output-dir", tmp_path / "scores"],
    ):
        assert workshop_main(argv) == 2
        err = capsys.readouterr().err
        assert "holds 1,024 MiB" in err and err.count("To fix: give --eval-file a smaller file") == 1, err
        assert "Traceback" not in err and sorted(p.name for p in tmp_path.iterdir()) == ["huge.jsonl"]


def test_a_deepspeed_below_the_floor_is_refused_with_the_fix():
    """The refusal names the installed version, why (docs/deepspeed_versions.md) and the fix; the floor and later
    releases, a local tag included, pass."""
    from workshop_lib.env import DEEPSPEED_FLOOR, check_deepspeed_version
    from workshop_lib.errors import WorkshopError

    for ok in (DEEPSPEED_FLOOR, f"{DEEPSPEED_FLOOR}+cu130", "0.20.0"):
        check_deepspeed_version(ok)
    for old in ("0.18.2", "0.19.7", f"{DEEPSPEED_FLOOR}rc1"):
        with pytest.raises(WorkshopError, match=r"(?s)docs/deepspeed_versions.md.*To fix: pip install -U 'deepspeed>="):
            check_deepspeed_version(old)


def test_every_yes_no_option_takes_true_or_false_and_help_shows_each_option_once(capsys):
    """`--tiny` and `--save-model` (HfArgumentParser's own yes/no options: bare, `true` or `false`) and a recipe
    option, None until the recipe fills it (`--drop-attention-mask true` or `false`; bare, argparse's message and
    the To fix line); `--help` names each option once."""
    for argv, expected in [
        (["--drop-attention-mask", "true"], True),
        (["--drop-attention-mask", "false"], False),
        (["--save-model", "false"], False),
        (["--no-save-model"], False),
        ([], True),
    ]:
        cfg = parse_run_args(["stage2", "--tiny", *argv])
        assert (
            cfg.tiny is True
            and (cfg.drop_attention_mask if "--drop-attention-mask" in argv else cfg.save_model) is expected
        )
    with pytest.raises(SystemExit):
        parse_run_args(["stage2", "--drop-attention-mask"])
    assert "expected one argument\nTo fix: see `workshop run --help`" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_run_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    shown = re.findall(r"(?:^|\s)(--[a-z][\w-]*)", text.split("options:", 1)[1])
    invocations = re.findall(r"(?:^|\s)(--[a-z][\w-]*)(?= [A-Z\[])", text)  # an option with its value shown
    assert not [o for o in shown if "_" in o] and len(invocations) == len(set(invocations))  # each option once


HEAVY = {"torch", "transformers", "deepspeed", "datasets", "pandas", "matplotlib"}


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["report", "--help"], ["export", "--help"], ["run", "--help"], ["eval", "--help"]],
    ids=" ".join,
)
def test_help_imports_no_heavy_library(argv):
    """What keeps `workshop --help` quick: the command's own help, and report's and export's, import none
    of torch, transformers, DeepSpeed, datasets, pandas, matplotlib; run's and eval's, generated from
    their dataclasses by HfArgumentParser, import transformers and none of the others. The real command in a
    fresh interpreter; its imports as `python -X importtime` lists them (each line's last field, indented by
    depth). No timing: the imports are what the time depends on."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "workshop_lib.cli", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=HANG_S,
    )
    assert out.returncode == 0 and out.stdout.startswith("usage: workshop"), out.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "workshop_lib" in imported, out.stderr[-2000:]  # the listing is there and is read right
    allowed = {"transformers"} if argv[0] in ("run", "eval") else set()
    assert not imported & (HEAVY - allowed), sorted(imported & HEAVY)


def test_damaged_run_files_and_markers_are_named_not_tracebacks(tmp_path, capsys):
    """A results.json cut short is skipped by `workshop report` with the reason; --out that is a file, a model
    config.json or a run_config.json that is no JSON object, and a RUNNING marker whose pid is no number each stop
    with one message and its fix, exit 2, nothing written."""
    ref = next((ROOT / "workshop_lessons" / "reference" / "h100" / "runs").iterdir())
    good, cut, bare = tmp_path / "good", tmp_path / "cut", tmp_path / "bare"
    for d in (good, cut, bare):
        shutil.copytree(ref, d, ignore=shutil.ignore_patterns("model", "checkpoints"))
    (cut / "results.json").write_text((cut / "results.json").read_text()[:100])
    (bare / "memory.csv").unlink()  # copied without it: the report's memory plot once failed after report.md
    assert workshop_main(["report", str(good), str(cut), str(bare), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    assert f"skipped {cut}: its results.json cannot be read" in err and (tmp_path / "report" / "report.csv").exists()
    assert len(pd.read_csv(tmp_path / "report" / "report.csv")) == 2  # good and bare, the latter's memory panel empty
    assert (tmp_path / "report" / "memory_over_time.png").stat().st_size > 0
    (tmp_path / "afile").write_text("mine")
    assert workshop_main(["report", str(good), "--out", str(tmp_path / "afile")]) == 2
    assert "is a file" in capsys.readouterr().err and (tmp_path / "afile").read_text() == "mine"

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("[1, 2]")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run_config.json").write_text('{"experiment": "baseli')
    (run / rundir.MARKER).write_text('{"status": "interrupted", "pid": 1}')
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / rundir.MARKER).write_text(f'{{"status": "running", "pid": "abc", "host": "{os.uname().nodename}"}}')
    for argv, expected in [
        (["--model", str(model), "--output-dir", str(tmp_path / "x")], "not a valid model config"),
        (["--output-dir", str(run), "--resume"], "run_config.json is damaged: the settings"),
        (["--output-dir", str(marked)], "marker holds no process id ('abc')"),
    ]:
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        assert workshop_main(["run", "baseline", "--tiny", *argv]) == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("To fix:") == 1 and "Traceback" not in err, err
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_a_run_of_one_process_listens_on_the_loopback_interface_only(tmp_path):
    """A ZeRO run without a launcher (a world of one) opens no port reachable from the network: its sockets
    are listed (psutil) while it trains, and every listening one is on 127.0.0.1 or ::1, none on MASTER_PORT."""
    import psutil

    out = tmp_path / "run"
    proc = Workshop("run", "stage2", "--tiny", "--max-steps", 100000, "--output-dir", out, cwd=tmp_path)
    try:
        _wait_for_training(out, proc)
        listening = {
            (c.laddr.ip, c.laddr.port)
            for c in psutil.Process(proc.pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        }
    finally:
        proc.kill()
        proc.wait()
    assert listening, "gloo listens for its peers: a run with no listening socket was not a DeepSpeed world"
    assert {ip for ip, _ in listening} <= {"127.0.0.1", "::1"}, listening


@pytest.mark.slow
def test_a_callback_given_to_run_experiment_sees_every_step(tmp_path):
    """`run_experiment(..., callbacks=[...])`: the caller's TrainerCallback runs in the real Trainer, once per
    optimizer step, and after the workshop's own at the end of training (train_log.csv already complete)."""
    import pandas as pd
    from transformers import TrainerCallback

    from workshop_lib.train import run_experiment

    class Seen(TrainerCallback):
        steps, logged = [], None

        def on_step_end(self, args, state, control, **kw):
            self.steps.append(state.global_step)

        def on_train_end(self, args, state, control, **kw):
            self.logged = sorted(pd.read_csv(tmp_path / "run" / "train_log.csv")["step"].unique())

    seen = Seen()
    r = run_experiment(
        "stage2",
        tiny=True,
        max_steps=3,
        save_strategy="no",
        save_model=False,
        output_dir=str(tmp_path / "run"),
        callbacks=[seen],
    )
    assert seen.steps == [1, 2, 3] == seen.logged and r["config"]["max_steps"] == 3


def test_atomic_path_leaves_the_old_file_or_the_whole_new_one(tmp_path):
    """`rundir.atomic_path`, the one way files and directories are written whole: a failure midway keeps the
    old content and leaves no temporary; a directory replaces an empty one; a lost race keeps the winner's."""
    target = tmp_path / "scores.json"
    rundir.write_json_atomic(target, {"em": 1.0})
    with pytest.raises(RuntimeError):
        with rundir.atomic_path(target) as tmp:
            tmp.write_text('{"em": ')
            raise RuntimeError("killed while writing")
    assert json.loads(target.read_text()) == {"em": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.json"]
    (tmp_path / "model").mkdir()
    with rundir.atomic_path(tmp_path / "model") as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["config.json"]
    with rundir.atomic_path(tmp_path / "model", raced_ok=True) as tmp:  # another writer got there first
        tmp.mkdir()
        (tmp / "other.json").write_text("{}")
    assert [p.name for p in (tmp_path / "model").iterdir()] == ["config.json"]
    with pytest.raises(OSError):  # the race allowance covers the rename, not a failure while writing
        with rundir.atomic_path(tmp_path / "model", raced_ok=True) as tmp:
            raise OSError(28, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "scores.json"]


def test_a_stop_after_the_run_claimed_its_folder_never_says_nothing_was_written():
    """A signal outside the training steps (rank 0 cleaning up after another rank died, when torchrun sends
    SIGTERM) is told as a stop before anything was written only before the run has claimed its folder."""
    for claimed, words in (
        (False, "stopped by SIGTERM before anything was written."),
        (True, "stopped by SIGTERM after the run had started: its folder's RUNNING marker"),
    ):
        with pytest.raises(rundir.RunInterrupted) as e, rundir.interruptible() as stop:
            stop.claimed = claimed
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next bytecode
        assert str(e.value).startswith(words) and e.value.exit_code == 143
    assert str(e.value.at_step(3, "no checkpoint was kept")) == "stopped by SIGTERM at step 3; no checkpoint was kept"
