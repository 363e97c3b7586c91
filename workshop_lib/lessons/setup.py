"""Notebook 00's answers, computed from the parameter counts (`model.count_params`) and the model-states
estimates table the notebook builds (`memory.estimate_model_states`, DeepSpeed's estimators)."""

from __future__ import annotations

import pandas as pd


def answers(qwen: dict, bloom: dict, estimates: pd.DataFrame, model_name: str) -> list[str]:
    """The answers to notebook 00's exercises, every figure from `qwen`/`bloom` (count_params dicts) and
    `estimates` (columns model, zero_stage, offload, GPUs, "GPU MiB per GPU"; MiB), for `model_name`."""
    q = estimates[estimates.model == model_name]

    def mib(stage, gpus):
        return q[(q.zero_stage == stage) & (q.offload == "-") & (q.GPUs == gpus)]["GPU MiB per GPU"].item()

    s0, s2, s3 = mib(0, 1), mib(2, 1), mib(3, 4)
    share = bloom["largest_layer_params"] / bloom["num_params"]
    out = [f"1. Qwen3-0.6B: {qwen['num_params']:,} parameters, largest tensor {qwen['largest_layer_params']:,} "
           f"(the {qwen['vocab_size']:,} x {qwen['hidden_size']} embedding); BLOOM-560m: {bloom['num_params']:,}, "
           f"largest {bloom['largest_layer_params']:,}: its {bloom['vocab_size']:,}-token multilingual vocabulary "
           f"makes the embedding {share:.0%} of the model.",
           f"2. stage 0, 1 GPU: {s0:,.0f} MiB; stage 3 on 4 GPUs: {s3:,.0f} MiB per GPU ({s3 / s0:.0%})."]
    same = abs(s0 - s2) < 1
    out.append(f"3. stage 0: {s0:,.0f} MiB, stage 2: {s2:,.0f} MiB on one GPU" + (
        ". ZeRO partitions states across data-parallel GPUs; with one GPU there is nothing to divide by, so stage 2 "
        "keeps what stage 0 keeps (only offload moves memory off a single GPU)." if same else
        ": they differ, which the estimator's formula does not lead us to expect on one GPU; compare its arguments."))
    return out
