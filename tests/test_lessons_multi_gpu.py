"""Notebook 04's answers (`workshop_lib.lessons.multi_gpu`) against the runs they were computed from: the
H200 reference runs (docs/h200/default-x4, steady state) standing in as the learner's runs. A wrong claim
fails here."""

import re

import pandas as pd

from workshop_lib import memory
from workshop_lib.lessons import DOCS, multi_gpu
from workshop_lib.results import load_results, scaling_table

P, LARGEST = 596_049_920, 155_582_464  # Qwen3-0.6B


def _arith():
    f = {0: lambda n: 16 * P, 1: lambda n: 4 * P + 12 * P / n, 2: lambda n: 2 * P + 14 * P / n, 3: lambda n: 16 * P / n}
    return pd.DataFrame([{"GPUs": n, "zero_stage": s, "16Ψ arithmetic MiB": round(g(n) / 2**20),
                          "DeepSpeed estimate MiB": memory.estimate_model_states(P, LARGEST, s, num_gpus_per_node=n)[
                              "estimated_model_states_gpu_mib"]} for n in (1, 2, 4, 8) for s, g in f.items()])


def test_answers_agree_with_the_h200_runs():
    ref = load_results(DOCS / "h200" / "default-x4" / "runs")
    scaling = scaling_table(ref)
    text = multi_gpu.answers(_arith(), scaling, ref, ref)
    a = _arith().set_index(["GPUs", "zero_stage"])["16Ψ arithmetic MiB"]
    assert f"ZeRO-2: {a[(1, 2)]:,} MiB on 1 GPU, {a[(2, 2)]:,} MiB per GPU on 2" in text[0]
    for exp, g in scaling.groupby("experiment"):
        d = g.iloc[-1]["peak GPU MiB per GPU"] - g.iloc[0]["peak GPU MiB per GPU"]
        assert any(t.startswith(f"2. {exp}:") and f"({d:+,.0f} MiB)" in t for t in text)
    eff = next(t for t in text if t.startswith("4."))
    for _, r in scaling[scaling.GPUs > 1].iterrows():
        assert f"{r.experiment} x{r.GPUs}: {float(r['scaling efficiency'].rstrip('%')):.0f}%" in eff
    assert "Below 100%" in eff  # every H200 efficiency is below 100%
    node = next(t for t in text if t.startswith("5."))
    assert "1 host(s), 4 ranks" in node and "on this one machine" in node  # all ranks on one host there
    assert not any(re.search(r"None|nan", t) for t in text)
