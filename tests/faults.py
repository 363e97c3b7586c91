"""`python tests/faults.py WHEN SIGNAL run ARGS...`: `workshop run ARGS...` in this process, which sends itself
SIGNAL (KILL, INT, TERM) at one exact moment at the end of the first epoch, for the resume tests. SIGNAL@RANK
(KILL@1, RAISE@1) acts on that rank alone under a launcher, the others running on: RAISE raises a RuntimeError there
(a rank's own bug):

    step_end   the epoch's last optimizer step has ended (before its evaluation and checkpoint)
    evaluating the epoch's evaluation has scored its second batch
    saving     the epoch's checkpoint has its model and optimizer states, not yet its RNG or trainer state
    saved      the epoch's checkpoint is complete, its manifest written (at the epoch's end)
    trained    training has ended (before the model is saved)

A TrainerCallback added to every Trainer of this process (transformers' `DEFAULT_CALLBACKS`) sends it; `saving`,
which no Trainer event marks, wraps `Trainer._save_rng_state`. Nothing here changes what the run computes."""

import os
import signal
import sys

import transformers
from transformers import TrainerCallback

when = action = only_rank = None  # install()'s


def fault() -> None:
    if only_rank and os.environ.get("RANK", "0") != only_rank:
        return
    if action == "RAISE":
        raise RuntimeError(f"a fault of rank {only_rank}'s own (tests/faults.py RAISE)")
    os.kill(os.getpid(), signal.Signals[f"SIG{action}"])


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


def install(at: str, signal_at_rank: str) -> None:
    """Plant the fault: at `at` (WHEN), SIGNAL[@RANK] (the script's two first arguments)."""
    global when, action, only_rank
    when, (action, _, only_rank) = at, signal_at_rank.partition("@")
    transformers.trainer.DEFAULT_CALLBACKS.append(Fault)
    if when == "saving":
        save_rng_state = transformers.Trainer._save_rng_state

        def _save_rng_state(self, output_dir):
            if end_of_first_epoch(self.state):
                fault()
            save_rng_state(self, output_dir)

        transformers.Trainer._save_rng_state = _save_rng_state


if __name__ == "__main__":
    install(sys.argv[1], sys.argv[2])
    from workshop_lib import cli  # after the hooks

    sys.exit(cli.main(sys.argv[3:]))
