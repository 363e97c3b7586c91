"""Notebook 00's answers (`lessons.setup`) against the estimates table the notebook builds, and the fallback
of exercise 3 on a table whose stage-2 row disagrees."""

import pandas as pd

from workshop_lib import memory, model
from workshop_lib.lessons import setup


def _estimates() -> pd.DataFrame:
    rows = []
    for name in (model.DEFAULT_MODEL, model.CLASSIC_MODEL):
        n = model.count_params(name)
        for stage in (0, 2, 3):
            for gpus in (1, 4):
                est = memory.estimate_model_states(n["num_params"], n["largest_layer_params"], stage,
                                                   num_gpus_per_node=gpus)
                rows.append({"model": name, "zero_stage": stage, "offload": "-", "GPUs": gpus,
                             "GPU MiB per GPU": est["estimated_model_states_gpu_mib"]})
    return pd.DataFrame(rows)


def test_setup_answers_follow_the_estimates_and_the_parameter_counts():
    qwen, bloom = model.count_params(model.DEFAULT_MODEL), model.count_params(model.CLASSIC_MODEL)
    est = _estimates()
    a = setup.answers(qwen, bloom, est, model.DEFAULT_MODEL)
    q = est[est.model == model.DEFAULT_MODEL].set_index(["zero_stage", "GPUs"])["GPU MiB per GPU"]
    assert f"Qwen3-0.6B: {qwen['num_params']:,} parameters" in a[0]
    assert f"{bloom['largest_layer_params'] / bloom['num_params']:.0%} of the model" in a[0]
    assert f"({q[3, 4] / q[0, 1]:.0%})" in a[1] and f"{q[0, 1]:,.0f} MiB" in a[1]
    assert q[0, 1] == q[2, 1] and "nothing to divide by" in a[2]
    # a table where stage 2 on one GPU disagrees (its 4-GPU figure put in its place): the fallback
    est.loc[(est.model == model.DEFAULT_MODEL) & (est.zero_stage == 2) & (est.GPUs == 1), "GPU MiB per GPU"] = q[2, 4]
    a = setup.answers(qwen, bloom, est, model.DEFAULT_MODEL)
    assert "they differ" in a[2] and "nothing to divide by" not in a[2]
