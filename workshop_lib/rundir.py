"""Output directories that never mix two runs, and runs that end cleanly on SIGINT / SIGTERM (introduced in
`01_baseline`; `run_experiment` uses it, `workshop report` reads `state`).

A run directory is in one of three states:
- finished: results.json (written atomically) and no RUNNING file;
- unfinished: a RUNNING file (JSON: pid, host, start time, the signal or error it ended with), or logs alone;
- empty: nothing of a run (it may hold other files, which a run leaves alone).

A run owns the files it writes there (`RUN_OUTPUTS`) and nothing else: it refuses a directory holding a run unless
`overwrite` (that run's files removed first) or `resume`; it always refuses one whose run is alive on this host.

Signals: SIGINT stops a run at once (`RunInterrupted`, exit status 130). SIGTERM and SIGUSR1 (SLURM's time limit,
preemption, `--signal=USR1@N`) during training stop it at the next optimizer step, after a checkpoint
(`RunPreempted`, exit status 75, EX_TEMPFAIL; --resume continues); before training, at once like SIGINT. A file
OUTPUT_DIR/STOP asks for the same stop as SIGUSR1: the batch scripts create it when SLURM signals them, which
reaches every rank on every node whatever the launcher (torchrun would die of a SIGUSR1 of its own)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil

from .errors import WorkshopError

MARKER = "RUNNING"
STOP_FILE = "STOP"  # created by the batch scripts on SLURM's warning signal; removed when a run starts
RUN_FILES = ("results.json", MARKER, "train_log.csv", "memory.csv")  # any of these: the directory holds a run
# Everything a run, `workshop eval` of it and the batch scripts write at the top of OUTPUT_DIR, by exact name (N: a
# rank or a step; `run_output`): what --overwrite removes, and where no link may stand (a run never writes through
# one). Set-aside checkpoints (DAMAGED) are never removed; a folder holding anything else is not a run's to overwrite.
RUN_OUTPUTS = RUN_FILES + (
    STOP_FILE,
    "memory.rankN.csv",
    "memory.before-resume-at-step-N.csv",  # `checkpoint.resume_point` keeps an interrupted attempt's memory logs
    "memory.rankN.before-resume-at-step-N.csv",
    "micro_batches.csv",
    "micro_batches.rankN.csv",
    "ds_config.json",
    "fsdp_config.json",
    "run_config.json",
    "launch.log",
    "model",
    ".model.tmp",
    "checkpoints",
    "predictions.jsonl",
    "squad_scores.json",
    "comms.json",
)
TEMPORARY = re.compile(r"^\.(.+)\.tmp\d+$")  # `atomic_path`'s temporary of NAME: .NAME.tmpPID
DAMAGED = "damaged-checkpoints"  # OUTPUT_DIR/damaged-checkpoints/checkpoint-N: set aside by a resume


def run_output(name: str) -> bool:
    """True when `name` is one that a run writes at the top of OUTPUT_DIR (`RUN_OUTPUTS`, N any number), or
    `atomic_path`'s temporary of one (.NAME.tmpPID)."""
    name = TEMPORARY.sub(r"\1", name)
    return re.sub(r"(rank|step-)\d+", r"\1N", name) in RUN_OUTPUTS


def _entries(folder: Path, chosen=run_output) -> list[Path]:
    """The entries of `folder` (links included, never followed) whose names `chosen` takes (default: a run's)."""
    return sorted(p for p in folder.iterdir() if chosen(p.name)) if folder.is_dir() else []


class RunInterrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM while a run is in progress; `signum` says which, the message
    when ("stopped by SIGINT before anything was written."; `at_step` tells a later stop). A KeyboardInterrupt, so
    a notebook treats it as an interrupted cell."""

    def __init__(self, signum: int, when: str = "before anything was written."):
        self.signum, self.signal = signum, signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal} {when}")

    def at_step(self, step: int, kept: str) -> RunInterrupted:
        """The same stop, of the same type, told with the optimizer step it came at and what it kept (`kept`:
        `checkpoint.kept`'s sentence)."""
        return type(self)(self.signum, f"at step {step}; {kept}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


EXIT_PREEMPTED = 75  # sysexits.h EX_TEMPFAIL: stopped with a checkpoint; the batch scripts requeue on it


class RunPreempted(RunInterrupted):
    """Raised after SIGTERM or SIGUSR1 stopped training at a step boundary with a checkpoint saved."""

    @property
    def exit_code(self) -> int:
        return EXIT_PREEMPTED


@dataclass
class StopRequest:
    """One run's stop state, made by `interruptible` and owned by the run (`train.Run.stop`), which hands it to the
    step callback (`callbacks.StopAtStepBoundary`). `signum`: the signal (SIGTERM, SIGUSR1) that asked the training in
    progress to stop at the next step boundary; None when none did. `training` is True while steps run, `ending`
    while a failed run ends (a launcher's SIGTERM to every rank once one failed must not replace the error):
    `interruptible` defers the signal only then; `claimed` once the run has claimed its output directory (a stop
    then is no longer "before anything was written")."""

    signum: int | None = None
    training: bool = False
    ending: bool = False
    claimed: bool = False


# psutil's create_time is read from /proc in clock ticks: two reads of one process agree to well under this
PID_CREATED_TOLERANCE_S = 1.0


@contextmanager
def atomic_path(path: str | os.PathLike, raced_ok: bool = False):
    """The one way the workshop writes a file or a directory that a reader or a later run may load: yields a
    temporary sibling (.NAME.tmpPID) to write into; on success it replaces `path` in one rename (readers see the
    old or the whole new, never half of it, even if the process dies while writing), on any error it is removed
    (a full disk, a signal: nothing half-written left behind). A directory replaces only an absent or empty
    `path`. raced_ok: if the rename fails because another process has just written `path` (the same content,
    e.g. ranks building one tokenizer), the temporary is dropped and `path` kept. The model a run saves is the
    exception (`train.save_model`): every rank writes into one directory, whose name cannot carry a pid.

    Raises:
        OSError: the rename failed (and not a race that raced_ok allows)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir():
            readable_as_umask(tmp)
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        try:
            os.replace(tmp, path)
        except OSError:
            if not (raced_ok and path.exists()):
                raise
            _remove(tmp)  # another process wrote `path` first
    except BaseException:
        _remove(tmp)
        raise


def no_link(path, flags: int) -> int:
    """`open()`'s opener for a file written in place: a link at its name (even one planted since) fails, ELOOP."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def readable_as_umask(folder: Path) -> None:
    """Give the files in `folder` the mode a plain write would: safetensors writes its file 0600."""
    umask = os.umask(0o022)
    os.umask(umask)
    for f in folder.iterdir():
        if f.is_file() and not f.is_symlink():
            f.chmod(0o666 & ~umask)


def _remove(p: Path) -> None:
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    """Write `obj` as JSON (indent 2) to `path` through `atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2) + "\n")


def alive(pid: int, host: str, created: float | None = None) -> bool:
    """True when the process `pid` runs on this host (one on another host is taken as alive; an ended one its parent
    has not reaped yet, a zombie, is not). With `created` (the marker's `pid_created`: the process's start, seconds
    since the epoch, as psutil reads it), a process of that pid that started at another time is another program that
    reused the pid after the run's process died: not alive."""
    if host != socket.gethostname():
        return True
    try:
        started = (proc := psutil.Process(pid)).create_time()
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
    return created is None or abs(started - created) < PID_CREATED_TOLERANCE_S


def _marker_alive(info: dict) -> bool:
    """`alive` for a marker's pid, host and process start; a pid that is no number (a damaged marker) belongs
    to no process. Markers written before `pid_created` was recorded are checked by pid alone."""
    pid, created = str(info.get("pid", 0)), info.get("pid_created")
    return pid.isdigit() and alive(
        int(pid), str(info.get("host", "")), created if isinstance(created, (int, float)) else None
    )


def state(out: str | os.PathLike) -> tuple[str, dict]:
    """("finished" | "unfinished" | "empty", the RUNNING marker's content or {})."""
    out = Path(out)
    marker = out / MARKER
    if marker.is_file():
        try:
            return "unfinished", json.loads(marker.read_text())
        except (OSError, ValueError):
            return "unfinished", {}
    if (out / "results.json").is_file():
        return "finished", {}
    if any((out / f).exists() for f in RUN_FILES):
        return "unfinished", {}
    return "empty", {}


def describe_unfinished(info: dict) -> str:
    """One sentence on an unfinished run from its marker: who started it, and how it ended."""
    if not info:
        return "a run that never finished (logs, no results.json)"
    who = f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"
    if info.get("status") == "interrupted":
        return f"a run stopped by {info.get('signal')} at step {info.get('step')} ({who})"
    if info.get("status") == "preempted":
        return f"a run stopped by {info.get('signal')} with a checkpoint at step {info.get('step')} ({who})"
    if info.get("status") == "failed":
        return f"a run that failed ({who}): {info.get('error', '')[:200]}"
    if not str(info.get("pid", 0)).isdigit():  # a marker edited or damaged by hand: no process to ask
        return f"a run whose {MARKER} marker holds no process id ({str(info.get('pid'))[:40]!r})"
    return f"a run {'still in progress' if _marker_alive(info) else 'whose process is gone (killed)'} ({who})"


def check(out: str | os.PathLike, overwrite: bool, resume: bool = False) -> None:
    """Refuse `out` when it holds a run that must not be replaced or continued. Reads only.

    Raises:
        WorkshopError: a finished run is there and `overwrite` is False; an unfinished run is there and
            neither `overwrite` nor `resume`; no run is there, but files a run writes are, even with `resume` (a
            user's `model/`, which the run would replace); `overwrite` of a run beside files no run writes (named: --overwrite removes
            only a run's files); a run there is still alive on this host (whatever the options); `out` or one
            of the run's files in it is a link (`refuse_links`)."""
    out = Path(out)
    refuse_links(out, None, "--output-dir")
    what, info = state(out)
    # a run's own files with no run: a user's (a --resume too would replace them); the batch scripts' are written first
    held = [p.name for p in _entries(out) if p.name not in ("launch.log", STOP_FILE)]
    if what == "empty" and held:
        raise WorkshopError(
            f"{out} holds {', '.join(held)}, which a run writes, but no run (no {MARKER} nor "
            "results.json); nothing was changed.",
            "move them, or pass another --output-dir.",
        )
    others = _entries(out, lambda name: not run_output(name) and name != DAMAGED)  # what no run writes
    if others and what != "empty" and overwrite and not resume:
        raise WorkshopError(
            f"{out} holds a run and files no run writes ({', '.join(p.name for p in others)}); "
            "--overwrite removes only a run's files, and nothing was changed.",
            "move those files out of the folder, or pass another --output-dir.",
        )
    if what == "finished" and not overwrite:
        raise WorkshopError(
            f"{out} already holds a finished run (results.json); nothing was changed."
            + (" There is nothing to resume." if resume else ""),
            "pass another --output-dir, or --overwrite to replace it.",
        )
    if what == "unfinished":
        if info.get("status") == "running" and _marker_alive(info):
            raise WorkshopError(
                f"{out} holds {describe_unfinished(info)}; nothing was changed.",
                f"wait for it to end, or stop it (kill {info.get('pid')}), or pass another "
                f"--output-dir. If process {info.get('pid')} is no workshop run of this directory, "
                f"remove {out / MARKER} and run again with --resume or --overwrite.",
            )
        if not (overwrite or resume):
            raise WorkshopError(
                f"{out} holds {describe_unfinished(info)}; nothing was changed.",
                "pass --resume to continue it from its last checkpoint, --overwrite to discard it "
                "and start again, or another --output-dir.",
            )


def refuse_links(folder: str | os.PathLike, names, flag: str) -> None:
    """Refuse to write into `folder` when it, or an entry in it among `names` (None: a run's, `run_output`), is a symbolic
    link: a write there would land outside the folder, or replace the link a user put there. Reads only.

    Raises:
        WorkshopError: the links found, ending in what to do (`flag` names the option that chose `folder`)."""
    folder = Path(folder)
    links = (
        [folder]
        if folder.is_symlink()
        else [p for p in _entries(folder, run_output if names is None else names.__contains__) if p.is_symlink()]
    )
    if links:
        raise WorkshopError(
            f"{', '.join(map(str, links))}: a symbolic link where the workshop would write; it "
            "never writes through a link, and nothing was changed.",
            f"pass the link's target ({links[0].resolve()}) or another {flag}"
            if links[0] == folder
            else f"remove {'that link' if len(links) == 1 else 'those links'}, or pass another {flag}.",
        )


def check_writable(path: str | os.PathLike, option: str) -> None:
    """Raise WorkshopError, naming `option`, unless a file can be created in `path` or, if it does not exist yet,
    in its nearest existing parent: checked before any work, with an anonymous temporary file."""
    probe = Path(path)
    while not probe.exists():
        probe = probe.parent
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise WorkshopError(
            f"{option} {path} cannot be written here ({probe}: {e.strerror}); nothing was written.",
            f"pass {option} a directory you can write to (your home or scratch directory).",
        ) from e


def claim(out: str | os.PathLike, overwrite: bool, resume: bool = False) -> None:
    """Make `out` this run's: check it, remove a previous run's files there (`RUN_OUTPUTS`, nothing else) when
    `overwrite` (keep them when `resume`), create it, and write the RUNNING marker. Call on rank 0 only, after
    every input was validated and loaded.

    Raises:
        WorkshopError: what `check` and `refuse_links` refuse."""
    out = Path(out)
    check(out, overwrite, resume)
    if state(out)[0] != "empty" and not resume:
        removed = _entries(out)
        for p in removed:
            _remove(p)
        print(f"Removed the previous run's files in {out} (--overwrite): {', '.join(p.name for p in removed)}.")
    out.mkdir(parents=True, exist_ok=True)
    (out / STOP_FILE).unlink(missing_ok=True)  # the last attempt's stop request, already obeyed
    write_json_atomic(
        out / MARKER,
        {
            "status": "running",
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "pid_created": psutil.Process().create_time(),
            "started": datetime.now().isoformat(timespec="seconds"),
        },
    )


def mark_ended(out: str | os.PathLike, **how) -> None:
    """Record in the RUNNING marker how an unfinished run ended (status "interrupted" or "failed", ...)."""
    marker = Path(out) / MARKER
    if marker.is_file():
        try:
            write_json_atomic(
                marker, json.loads(marker.read_text()) | how | {"ended": datetime.now().isoformat(timespec="seconds")}
            )
        except OSError as e:  # a full disk: the marker still says "running", for a process that is gone
            print(f"Could not record in {marker} how the run ended ({e}); it names a process that has ended.")


def finish(out: str | os.PathLike, results: dict) -> None:
    """Write results.json atomically, then remove the marker: the directory now holds a finished run."""
    write_json_atomic(Path(out) / "results.json", results)
    (Path(out) / MARKER).unlink(missing_ok=True)


@contextmanager
def interruptible():
    """Turn SIGINT, SIGTERM and SIGUSR1 into `RunInterrupted` in the main thread for the duration, except
    SIGTERM and SIGUSR1 while the yielded `StopRequest`'s `training` or `ending`: those are recorded in its `signum`
    for the training loop to stop at the next step boundary with a checkpoint. Restores the previous handlers after.
    Elsewhere than the main thread it changes nothing but the yielded state."""

    def raise_interrupted(signum, frame):
        if signum != signal.SIGINT and (stop.training or stop.ending):
            stop.signum = signum  # the training loop checkpoints and stops at the next step boundary
            return
        if stop.claimed:  # the run tells the step where it can (`RunInterrupted.at_step`)
            raise RunInterrupted(signum, "after the run had started: its folder's RUNNING marker says how far it got.")
        raise RunInterrupted(signum)

    stop = StopRequest()
    try:
        previous = {s: signal.signal(s, raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    except ValueError:  # not the main thread
        previous = {}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
