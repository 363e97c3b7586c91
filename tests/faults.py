"""`python tests/faults.py WHEN SIGNAL run ARGS...`: `workshop run ARGS...` in this process, which sends itself
SIGNAL (KILL, INT, TERM) at one exact moment at the end of the first epoch, for the resume tests, or, with
SIGNAL FILL, fills the disk that holds the current directory at that moment (a file `filler` at its mount
point, up to FILL_LEAVES_KIB free), for the full-disk tests. SIGNAL@RANK (KILL@1, RAISE@1) acts on that rank
alone under a launcher, the others running on: RAISE raises a RuntimeError there (a rank's own bug):

    step_end   the epoch's last optimizer step has ended (before its evaluation and checkpoint)
    evaluating the epoch's evaluation has scored its second batch
    saving     the epoch's checkpoint has its model and optimizer states, not yet its RNG or trainer state
    saved      the epoch's checkpoint is complete, its manifest written (at the epoch's end)
    trained    training has ended (before the model is saved)
    claiming   the run has its model and data and is about to claim its output directory, 5 s after the other
               ranks began to wait for it there (a collective)
    loading    the run starts loading its model, the other ranks loading theirs (up to 60 s longer: no collective
               runs, so what reaches them is the launcher's SIGTERM)

A TrainerCallback added to every Trainer of this process (transformers' `DEFAULT_CALLBACKS`) sends it; `saving`
`claiming` and `loading`, which no Trainer event marks, wrap `Trainer._save_rng_state`, `workshop_lib.train.claim`
and `workshop_lib.train.load_model`. Nothing here changes what the run computes."""

import os
import shutil
import signal
import sys
import time

import transformers
from transformers import TrainerCallback

when, (action, _, only_rank) = sys.argv[1], sys.argv[2].partition("@")
FILL_LEAVES_KIB = 256  # room for the run's marker and logs, none for a checkpoint or the model


def fault() -> None:
    if only_rank and os.environ.get("RANK", "0") != only_rank:
        return
    if action == "RAISE":
        raise RuntimeError(f"a fault of rank {only_rank}'s own (tests/faults.py RAISE)")
    if action != "FILL":
        os.kill(os.getpid(), signal.Signals[f"SIG{action}"])
        return
    mount = os.path.realpath(".")
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    with open(os.path.join(mount, "filler"), "wb") as f:
        while (free := shutil.disk_usage(mount).free) > FILL_LEAVES_KIB * 1024:
            f.write(bytes(min(free - FILL_LEAVES_KIB * 1024, 2**20)))
            f.flush()


def end_of_first_epoch(state) -> bool:
    return state.epoch is not None and abs(state.epoch - 1) < 1e-6


class Fault(TrainerCallback):
    batches = 0

    def on_step_end(self, args, state, control, **kw):
        if when == "step_end" and end_of_first_epoch(state):
            fault()

    def on_prediction_step(self, args, state, control, **kw):
        self.batches += 1
        if when == "evaluating" and end_of_first_epoch(state) and self.batches == 2:
            fault()

    def on_epoch_end(self, args, state, control, **kw):  # after the save and every on_save (the manifest)
        if when == "saved" and end_of_first_epoch(state):
            fault()

    def on_train_end(self, args, state, control, **kw):
        if when == "trained":
            fault()


transformers.trainer.DEFAULT_CALLBACKS.append(Fault)
if when == "saving":
    save_rng_state = transformers.Trainer._save_rng_state

    def _save_rng_state(self, output_dir):
        if end_of_first_epoch(self.state):
            fault()
        save_rng_state(self, output_dir)

    transformers.Trainer._save_rng_state = _save_rng_state

if when == "claiming":
    from workshop_lib import train

    claim = train.claim

    def _claim(run):
        if os.environ.get("RANK", "0") == (only_rank or "0"):
            time.sleep(5)  # the other ranks reach the claim's collective first, and wait for this one there
        fault()
        claim(run)

    train.claim = _claim

if when == "loading":
    from workshop_lib import train

    load_model = train.load_model

    def _load_model(run):
        fault()
        if os.environ.get("RANK", "0") != (only_rank or "0"):
            time.sleep(60)  # still loading when the faulty rank's end reaches this one
        load_model(run)

    train.load_model = _load_model

from workshop_lib import cli  # noqa: E402 - after the hooks

sys.exit(cli.main(sys.argv[3:]))
