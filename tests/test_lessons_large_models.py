"""Notebook 03c's reference table and choices, read from the committed GPU runs (docs/h100/large-models,
docs/h200/large-models-x2): each run's outcome from its own files, the estimate beside it."""

from workshop_lib.fit import estimate
from workshop_lib.lessons import large_models as lm

H100 = lm.REFERENCES["one H100 80GB, 128 GiB host"]
X2 = lm.REFERENCES["two H200 141GB, 256 GiB host"]


def test_each_reference_run_says_how_it_ended():
    df = lm.reference_runs(H100).set_index(["model", "experiment", "activation checkpointing"])
    assert df.loc[("Qwen/Qwen3-4B", "stage3_offload", False), "outcome"] == "trained"
    assert df.loc[("Qwen/Qwen3-4B", "baseline", True), "outcome"] == "trained"
    assert df.loc[("Qwen/Qwen3-4B", "baseline", False), "outcome"].startswith("The GPU ran out of memory during baseline")
    assert "more than 90% of this GPU" in df.loc[("Qwen/Qwen3-4B", "stage2", False), "outcome"]
    assert df.loc[("Qwen/Qwen3-8B", "stage3_offload", False), "outcome"].startswith("killed, no error written (host RSS 126,568")
    assert df.loc[("Qwen/Qwen3-1.7B", "stage3_nvme", False), "outcome"] == "Not enough buffers 0 for swapping 1"
    # the estimate beside a run is fit.estimate for its settings
    row = df.loc[("Qwen/Qwen3-4B", "stage3_offload", False)]
    assert row["est. total GPU MiB"] == estimate("Qwen/Qwen3-4B", 3, "cpu", max_length=8192)["total_gpu_mib"]
    assert row["steady tokens/s"] > 0 and row["host peak RSS MiB"] > row["est. states GPU MiB"]


def test_largest_trained_model_per_experiment_on_each_machine():
    assert lm.largest_trained(lm.reference_runs(H100)) == {"baseline": "Qwen/Qwen3-4B", "stage3_offload": "Qwen/Qwen3-4B"}
    x2 = lm.reference_runs(X2)
    assert set(x2["GPUs"]) == {2}
    assert lm.largest_trained(x2) == {"stage3": "Qwen/Qwen3-8B", "stage3_offload": "Qwen/Qwen3-8B"}


def test_the_model_that_does_not_fit_is_picked_from_the_estimates():
    df = lm.configurations("Qwen/Qwen3-4B", "H100 80GB", lm.REFERENCE_HOST_MIB).set_index("experiment")
    assert not df.at["baseline", "fits"] and df.at["stage3_offload", "fits"]
    assert lm.pick_model("H100 80GB", lm.REFERENCE_HOST_MIB) == "Qwen/Qwen3-4B"
    # 8B: the GPU side fits with offload, its host states (~206 GiB) do not fit 128 GiB
    e8 = lm.configurations("Qwen/Qwen3-8B", "H100 80GB", lm.REFERENCE_HOST_MIB).set_index("experiment")
    assert not e8.at["stage3_offload", "fits"] and e8.at["stage3_offload", "states host MiB"] > lm.REFERENCE_HOST_MIB
    # a GPU with room for the baseline of every shipped Qwen3 but 8B: the pick follows
    assert lm.pick_model("H200 141GB", 256 * 1024) == "Qwen/Qwen3-8B"
