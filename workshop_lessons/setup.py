"""Notebook 00's figures, from the parameter counts (`model.count_params`) and the model-states estimates table
the notebook builds (`memory.estimate_model_states`, DeepSpeed's estimators). Records, not sentences: the
solution notebook writes the answers from them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from workshop_lib.model import count_params

from .comparisons import Comparison, compare


@dataclass(frozen=True)
class ParamCounts:
    """One model's size, from `model.count_params` (built on the meta device: no download): parameters, the
    largest single tensor (parameters; the token embedding in both shipped models), vocabulary (tokens) and
    hidden size (features)."""

    model: str
    num_params: int
    largest_layer_params: int
    vocab_size: int
    hidden_size: int

    @property
    def largest_share(self) -> float:
        """The largest tensor's share of all parameters, a fraction."""
        return self.largest_layer_params / self.num_params

    @property
    def largest_is_embedding(self) -> bool:
        """The largest tensor has vocab_size x hidden_size parameters: the token embedding."""
        return self.largest_layer_params == self.vocab_size * self.hidden_size


def param_counts(name: str, counts: dict | None = None) -> ParamCounts:
    """`ParamCounts` of `name` from `counts` (a `model.count_params` dict), or `model.count_params(name)`."""
    c = counts or count_params(name)
    return ParamCounts(name, c["num_params"], c["largest_layer_params"], c["vocab_size"], c["hidden_size"])


def params_table(names: list[str]) -> pd.DataFrame:
    """One row per model of `names` (`param_counts`): its parameters, largest tensor, vocabulary and hidden size,
    and the largest tensor's share in %. Data for exercise 1, shown in the learner's notebook."""
    rows = [param_counts(n) for n in names]
    return pd.DataFrame(
        {
            "model": [r.model for r in rows],
            "parameters": [r.num_params for r in rows],
            "largest tensor (parameters)": [r.largest_layer_params for r in rows],
            "vocabulary (tokens)": [r.vocab_size for r in rows],
            "hidden size": [r.hidden_size for r in rows],
            "largest tensor (% of parameters)": [round(100 * r.largest_share, 1) for r in rows],
        }
    )


@dataclass(frozen=True)
class ZeroSplit:
    """How ZeRO divides one model's states (the estimates table, MiB per GPU, no offload): stage 0 and stage 2
    on one GPU, stage 3 on four, and stage 2 against stage 0 on one GPU (`Comparison` without a band: the two
    come from one formula, so "equal" is exact, anything else a difference of the estimator's arguments)."""

    model: str
    stage0_1gpu_mib: float
    stage2_1gpu_mib: float
    stage3_4gpu_mib: float
    stage2_vs_stage0: Comparison

    @property
    def stage3_fraction(self) -> float:
        """Stage 3's share per GPU on 4 GPUs of stage 0's on one, a fraction."""
        return self.stage3_4gpu_mib / self.stage0_1gpu_mib


def zero_split(estimates: pd.DataFrame, model_name: str) -> ZeroSplit:
    """`ZeroSplit` of `model_name` from `estimates` (columns model, zero_stage, offload ("-": none), GPUs,
    "GPU MiB per GPU"; the notebook's table). Raises ValueError where a row is missing or repeated."""
    q = estimates[estimates.model == model_name]

    def mib(stage, gpus):
        return float(q[(q.zero_stage == stage) & (q.offload == "-") & (q.GPUs == gpus)]["GPU MiB per GPU"].item())

    s0, s2 = mib(0, 1), mib(2, 1)
    return ZeroSplit(model_name, s0, s2, mib(3, 4), compare("estimated_model_states_gpu_mib", s2, s0, noise=None))
