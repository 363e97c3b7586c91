"""Notebook 03b's figures, from its runs: the checkpoint's files, the uninterrupted ZeRO-3 + offload run and the
run killed and resumed (results.json dicts), the reloaded model and the scored one. Records and tables, not sentences: the solution notebook
writes the answers from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from workshop_lib import checkpoint
from workshop_lib.results import title, unit
from workshop_lib.units import MiB, ceil_div

from .comparisons import Comparison, compare

# what each file of a Trainer + DeepSpeed checkpoint holds, by a part of its name
HOLDS = {
    "optim_states": "the optimizer's partition: fp32 master weights and Adam's two moments",
    "model_states": "the module's states and DeepSpeed's bookkeeping (under ZeRO-3 no weights)",
    "model.safetensors": "the model's own copy, in the training precision",
    "optimizer.pt": "the optimizer's state",
}
# What a checkpoint of mixed-precision Adam holds per parameter: the optimizer states, K = 12 bytes (fp32 master
# weights 4, Adam's momentum 4 and variance 4: Rajbhandari et al. 2020, "ZeRO", section 3.1), and the model's own
# weights in the training precision (model.safetensors: 2 bytes in bf16 or fp16, 4 in fp32). Gradients are not
# saved. A bf16 ZeRO-3 run on a GPU, as this notebook's: 14 bytes/param; the CPU's fp32 run: 16. At stages 0-2 the
# model_states file holds the module's weights too (`HOLDS`): 2 (or 4) bytes/param more. Small files (tokenizer,
# trainer state, RNG states) come on top: on a tiny model they weigh more than on a real one.
# A resumed run's last eval loss counts as the uninterrupted run's within this relative difference: on the CPU
# in fp32 the two were measured identical (tests/test_cli.py); on a GPU, kernels may differ in the last bits.
RESUME_TOLERANCE = 1e-3
# Checkpoints sized for a classroom (a Qwen3-0.6B checkpoint is about 8 GiB): each run of the notebook writes SAVES
# checkpoint (at its last step), the killed run one per step until KILL_AFTER are complete.
SAVES, KILL_AFTER = 1, 2


def save_settings(max_steps: int | None) -> dict:
    """The RunConfig checkpoint settings of the notebook's runs: `SAVES` checkpoints per run, every
    ceil(max_steps / SAVES) optimizer steps (with SAVES 1: at the last step); one per epoch where the run goes
    by epochs (max_steps None)."""
    if max_steps is None:
        return {"save_strategy": "epoch"}
    return {"save_strategy": "steps", "save_steps": ceil_div(max_steps, SAVES)}


@dataclass(frozen=True)
class CheckpointPlan:
    """What the notebook writes to disk, computed before it writes: `written` checkpoints of
    `bytes_per_param` x `num_params` bytes, of which `kept` stay (save_total_limit per run), and `models`
    model directories in the training precision (model/ of each run), and the fp32 export."""

    num_params: int
    precision: str
    written: int
    kept: int
    models: int

    @property
    def bytes_per_param(self) -> int:
        return checkpoint.bytes_per_param(self.precision)

    @property
    def checkpoint_mib(self) -> float:
        return self.bytes_per_param * self.num_params / MiB

    @property
    def written_mib(self) -> float:
        return self.written * self.checkpoint_mib

    @property
    def kept_mib(self) -> float:
        """Checkpoints kept and model directories, MiB: the disk space the notebook's runs hold at the end."""
        return (
            self.kept * self.checkpoint_mib
            + (self.models * checkpoint.WEIGHT_BYTES[self.precision] + checkpoint.WEIGHT_BYTES["fp32"])
            * self.num_params
            / MiB
        )


def checkpoint_plan(
    num_params: int, precision: str, max_steps: int | None, epochs: int, save_total_limit: int = 2
) -> CheckpointPlan:
    """`CheckpointPlan` of notebook 03b's runs for a model of `num_params` trained in `precision`: the
    uninterrupted run and the resumed one write `SAVES` checkpoints each (`epochs` where max_steps is None),
    the killed run `KILL_AFTER` (and perhaps one more, half written, when it is killed); each run keeps at most
    `save_total_limit`; three runs save model/ and one export in fp32 follows."""
    per_run = SAVES if max_steps is not None else epochs
    return CheckpointPlan(
        int(num_params),
        precision,
        written=2 * per_run + KILL_AFTER + 1,
        kept=min(per_run, save_total_limit) + save_total_limit,
        models=3,
    )


def holds(file: str) -> str:
    """What a checkpoint file holds, from its name ("a file the table above does not explain" if unknown)."""
    return next((v for k, v in HOLDS.items() if k in file), "a file the table above does not explain")


def checkpoint_files(ckpt: str | Path, num_params: int | None = None) -> pd.DataFrame:
    """Every file of a checkpoint directory: columns file (path relative to `ckpt`) and MiB, in path order;
    with `num_params`, also "bytes/param" (the file's bytes per model parameter)."""
    ckpt = Path(ckpt)
    df = pd.DataFrame(
        [(str(f.relative_to(ckpt)), f.stat().st_size / MiB) for f in sorted(ckpt.rglob("*")) if f.is_file()],
        columns=["file", "MiB"],
    )
    if num_params:
        df["bytes/param"] = df["MiB"] * MiB / num_params
    return df


@dataclass(frozen=True)
class CheckpointSize:
    """A checkpoint on disk: all its files (MiB) and per parameter (bytes/param), its largest file, and the
    run's precision, which decides the expected bytes/param (`expected_bytes_per_param`)."""

    total_mib: float
    num_params: int
    largest_file: str
    largest_mib: float
    precision: str  # the run's training precision (results.json's "precision": bf16, fp16 or fp32)

    @property
    def bytes_per_param(self) -> float:
        return self.total_mib * MiB / self.num_params

    @property
    def largest_bytes_per_param(self) -> float:
        return self.largest_mib * MiB / self.num_params

    @property
    def expected_bytes_per_param(self) -> int:
        """`checkpoint.bytes_per_param` of a ZeRO-3 run in the run's precision: 14 in bf16."""
        return checkpoint.bytes_per_param(self.precision)

    @property
    def largest_holds(self) -> str:
        """What the largest file holds (`holds`)."""
        return holds(self.largest_file)


def checkpoint_size(files: pd.DataFrame, num_params: int, precision: str) -> CheckpointSize:
    """`CheckpointSize` of `files` (`checkpoint_files`: columns file, MiB) for a model of `num_params` trained
    in `precision` (bf16, fp16 or fp32)."""
    big = files.sort_values("MiB", ascending=False).iloc[0]
    return CheckpointSize(float(files["MiB"].sum()), int(num_params), str(big.file), float(big.MiB), precision)


@dataclass(frozen=True)
class Resume:
    """A run killed and resumed against the same run uninterrupted: the checkpoint step it resumed from, the
    run's optimizer steps, and the last eval loss of each (nats; `eval_loss.band` is `RESUME_TOLERANCE`, a
    tolerance rather than a measured spread). `verdict`: "restored" where the losses agree within it."""

    resume_step: int
    global_steps: int
    eval_loss: Comparison  # the resumed run's against the uninterrupted run's

    @property
    def steps_redone(self) -> int:
        """Optimizer steps the resumed run trained: those after its checkpoint."""
        return self.global_steps - self.resume_step

    @property
    def verdict(self) -> Literal["restored", "diverged"]:
        return "restored" if self.eval_loss.verdict in ("within the band", "equal") else "diverged"


def resume(resume_step: int, resumed: dict, uninterrupted: dict) -> Resume:
    """`Resume` from the step the killed run resumed from and the two runs' results.json dicts."""
    return Resume(
        int(resume_step),
        int(resumed["global_steps"]),
        compare("eval_loss", resumed["eval_loss"][-1], uninterrupted["eval_loss"][-1], noise=RESUME_TOLERANCE),
    )


def runs_table(uninterrupted: dict, resumed: dict, reloaded_eval_loss: float, scored: dict) -> pd.DataFrame:
    """The exercise table of notebook 03b, from its runs (results.json dicts) and the reloaded model's eval loss
    (nats): train loss and last eval loss (nats), exact match and F1 (%, SQuAD v1.1) where each was measured."""
    nan = float("nan")
    return pd.DataFrame(
        [
            [uninterrupted["train_loss"], uninterrupted["eval_loss"][-1], nan, nan],
            [resumed["train_loss"], resumed["eval_loss"][-1], nan, nan],
            [nan, reloaded_eval_loss, nan, nan],
            [nan, nan, scored["em_before"], scored["f1_before"]],
            [scored["train_loss"], scored["eval_loss"][-1], scored["em"], scored["f1"]],
        ],
        index=[
            "ZeRO-3 + offload, uninterrupted",
            "the same, killed and resumed",
            "the reloaded model/",
            "before fine-tuning (section 5)",
            "after fine-tuning (section 5)",
        ],
        columns=[
            f"{title('train_loss')} ({unit('train_loss')})",
            f"last eval loss ({unit('eval_loss')})",
            title("em"),
            title("f1"),
        ],
    )
