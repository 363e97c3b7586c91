"""The workshop's own Trainer callbacks, which `train.train` adds to every run before the caller's (introduced in
`01_baseline`, whose train_log.csv `StepLog` writes): the step log, the stop at a step boundary (SIGTERM,
SIGUSR1, the stop file), each epoch's evaluation before the step's checkpoint, and the memory phases.

Each is a TrainerCallback class (transformers' pattern), built from what it needs of the run (a path, a clock,
the sampler)."""

from __future__ import annotations

import csv
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch._dynamo.utils import counters
from transformers import TrainerCallback

from . import rundir
from .memory import MemorySampler


class StepLog(TrainerCallback):
    """Appends every Trainer log to a CSV (rank 0): each optimizer step's loss, learning rate, gradient norm, its time
    in seconds (`step_time_s`: from the previous step's end, or from the end of an evaluation or a checkpoint, to this
    step's end) and its non-padding tokens, all ranks; each epoch's eval loss. `time_s` counts from `t0`, the memory
    sampler's start, so the two CSVs share one clock. A run resumed at step N keeps the file's rows up to N, with all their columns, and appends.
    The callback keeps `step_times`, `step_tokens`, `step_ends` and `step_compiles` (`compiles`: graphs torch.compile
    built in the step) for the steady-state figures (`metrics.steady_state`). With the Trainer's logging_steps N > 1 a
    row is written every N steps (its loss the mean since the last row)."""

    FIELDS = [
        "step",
        "epoch",
        "time_s",
        "loss",
        "eval_loss",
        "learning_rate",
        "grad_norm",
        "step_time_s",
        "tokens",
        "num_input_tokens_seen",
        "compiles",
    ]

    def __init__(self, path: Path, t0: float):
        self.path, self.t0 = path, t0

    def on_train_begin(self, args, state, control, **kw):
        self.last, self.seen, self.graphs = time.perf_counter(), state.num_input_tokens_seen, _graphs()
        self.step_times, self.step_tokens, self.step_ends, self.step_compiles = [], [], [], []
        if state.is_world_process_zero:
            kept, fields = [], list(self.FIELDS)
            if state.global_step and self.path.is_file():  # resumed: the rows up to the checkpoint's step, every column
                with self.path.open(newline="") as f:
                    rows = csv.DictReader(f)
                    kept = [r for r in rows if int(r["step"]) <= state.global_step]
                fields += [c for c in rows.fieldnames or () if c not in fields]
            self.f = open(self.path, "w", newline="", opener=rundir.no_link)
            self.w = csv.DictWriter(self.f, fields, extrasaction="ignore")
            self.w.writeheader()
            self.w.writerows(kept)

    def on_step_end(self, args, state, control, **kw):
        if state.global_step >= state.max_steps:
            control.should_log = True  # the last step, whatever logging_steps: every run logs a loss
        now = time.perf_counter()
        self.step_times.append(now - self.last)
        self.step_tokens.append(state.num_input_tokens_seen - self.seen)
        self.step_ends.append(now - self.t0)
        graphs = _graphs()
        self.step_compiles.append(graphs - self.graphs)
        self.last, self.seen, self.graphs = now, state.num_input_tokens_seen, graphs

    def on_evaluate(self, args, state, control, **kw):
        self.last = time.perf_counter()  # the next step is timed from here: evaluation is not a step

    on_save = on_evaluate  # nor is writing a checkpoint

    def on_log(self, args, state, control, logs=None, **kw):
        if not (state.is_world_process_zero and logs and ("loss" in logs or "eval_loss" in logs)):
            return
        row = logs | {"step": state.global_step, "time_s": round(time.perf_counter() - self.t0, 3)}
        if "loss" in logs and self.step_times:
            row |= {
                "step_time_s": round(self.step_times[-1], 4),
                "tokens": self.step_tokens[-1],
                "compiles": self.step_compiles[-1],
            }
        self.w.writerow(row)
        self.f.flush()

    def on_train_end(self, args, state, control, **kw):
        if state.is_world_process_zero:
            self.f.close()


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]  # graphs torch.compile has built in this process


class MicroBatches(TrainerCallback):
    """This rank's training micro-batches, written to `path` when training ends: the optimizer step each belongs
    to, its shape (sequences x padded length) and its forward pass in ms (CUDA events, which keep the host from
    waiting; a wall clock on a CPU). Every step waits for the slowest rank: the ranks' forward times at one step
    show which rank that was and by how much (`workshop_lessons.multi_gpu.stragglers`). ZeRO-2's forward holds
    no communication; ZeRO-3's holds its parameter gathers."""

    FIELDS = ["step", "sequences", "length", "forward_ms"]

    def __init__(self, path: Path):
        self.path, self.rows, self.hooks = path, [], []

    def on_train_begin(self, args, state, control, model=None, **kw):
        def clock():  # a CUDA event recorded on the stream (the host does not wait), else the wall clock
            if not torch.cuda.is_available():
                return time.perf_counter()
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        def begin(module, positional, named):
            if module.training:
                self.rows.append([state.global_step + 1, *named["input_ids"].shape, clock(), None])

        def end(module, positional, output):
            if module.training and self.rows:
                self.rows[-1][-1] = clock()

        self.hooks = [model.register_forward_pre_hook(begin, with_kwargs=True), model.register_forward_hook(end)]

    def on_train_end(self, args, state, control, **kw):
        for hook in self.hooks:
            hook.remove()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        cuda = torch.cuda.is_available()
        rows = [[*r[:3], round(a.elapsed_time(b) if cuda else (b - a) * 1e3, 2)] for *r, a, b in self.rows if b]
        with rundir.atomic_path(self.path) as tmp, tmp.open("w", newline="") as f:
            csv.writer(f).writerows([self.FIELDS] + rows)


class StopAtStepBoundary(TrainerCallback):
    """At every optimizer step's end, asks all ranks whether one received SIGTERM or SIGUSR1 (`request`, the run's
    `rundir.StopRequest`) or sees `stop_file` (taken as SIGUSR1): a max over ranks, so they stop at the same step
    whichever rank was asked. If so the Trainer saves a checkpoint there and stops. `signum` keeps the signal."""

    def __init__(self, stop_file: Path, request: rundir.StopRequest):
        self.stop_file, self.request, self.signum = stop_file, request, None

    def on_step_end(self, args, state, control, **kw):
        asked = int(self.request.signum or (signal.SIGUSR1 if self.stop_file.exists() else 0))
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            asked_ = torch.tensor([asked], device=args.device)  # a world of one needs no GPU round trip
            dist.all_reduce(asked_, op=dist.ReduceOp.MAX)
            asked = int(asked_.item())
        if asked:
            self.signum = asked
            control.should_save = control.should_training_stop = True

    def on_epoch_end(self, args, state, control, **kw):
        # Stopped mid-epoch, the Trainer would evaluate the unfinished epoch before the checkpoint: that
        # epoch's evaluation comes when the resumed run finishes it, so an interrupted run's evaluations
        # are those of an uninterrupted one.
        if self.signum and abs(state.epoch - round(state.epoch)) > 1e-6:
            control.should_evaluate = False


class EvaluateBeforeSave(TrainerCallback):
    """Makes each epoch's evaluation at the end of the epoch's last optimizer step (or of the run's last, when
    max_steps ends it mid-epoch) instead of at the epoch's end, so that a checkpoint of that step holds the
    evaluation in its log history (trainer_state.json) and a run resumed from it never skips it. The Trainer
    evaluates before it saves within one step's end (`_maybe_log_save_evaluate`), but by itself it evaluates at
    the epoch's end (`DefaultFlowCallback.on_epoch_end`), after the checkpoint that save_strategy "steps" or a
    stop at the step boundary wrote at the step's end. The epoch's end then neither evaluates again nor writes
    the checkpoint of the same step a second time."""

    evaluated = saved = None  # the global step of this run's last evaluation, last checkpoint

    def on_step_end(self, args, state, control, **kw):
        if abs(state.epoch - round(state.epoch)) < 1e-6 or state.global_step >= state.max_steps:
            control.should_evaluate = True

    def on_evaluate(self, args, state, control, **kw):
        self.evaluated = state.global_step

    def on_save(self, args, state, control, **kw):
        self.saved = state.global_step

    def on_epoch_end(self, args, state, control, **kw):
        if self.evaluated == state.global_step:
            control.should_evaluate = False
        if self.saved == state.global_step:
            control.should_save = False


class Phases(TrainerCallback):
    """Marks the memory phases on `mem`: training begins (after model and engine set-up), the first optimizer
    step of this train() call has ended (the model states kept between steps), training ends."""

    def __init__(self, mem: MemorySampler):
        self.mem, self.first = mem, True

    def on_train_begin(self, args, state, control, **kw):
        self.mem.mark("train_begin")

    def on_step_end(self, args, state, control, **kw):
        if self.first:
            self.mem.mark("states")
            self.first = False

    def on_train_end(self, args, state, control, **kw):
        self.mem.mark("train_end")
