"""The benchmark's host-sync levers, real DeepSpeed on the CPU: --logging-steps N (`train.WorkshopTrainer`, unsynced: tokens
counted on the host, the gradient norm read back at logging steps only) and --max-grad-norm 0 (DeepSpeed's
compute_grad_norm false) change what is read from the device and when, not the training."""

import json

import pandas as pd
import pytest

from conftest import skip_unless_runnable, workshop

RUN = ["--tiny", "--max-steps", "8", "--save-strategy", "no", "--save-model", "false"]


def _log(out):
    return pd.read_csv(out / "train_log.csv").dropna(subset=["loss"]).set_index("step")


@pytest.mark.slow
def test_logging_every_n_steps_counts_the_same_tokens_and_logs_the_mean_loss(tmp_path):
    skip_unless_runnable("stage2")
    every, four, no_norm = tmp_path / "every", tmp_path / "four", tmp_path / "no_norm"
    workshop("run", "stage2", *RUN, "--output-dir", every)
    workshop("run", "stage2", *RUN, "--output-dir", four, "--logging-steps", "4")
    a, b = _log(every), _log(four)
    assert list(b.index) == [4, 8]
    assert list(b["num_input_tokens_seen"]) == list(a.loc[[4, 8], "num_input_tokens_seen"])  # counted on the host
    for end in (4, 8):  # the Trainer logs the mean loss since its last log; the training is the same
        assert b.at[end, "loss"] == pytest.approx(a.loc[end - 3 : end, "loss"].mean(), abs=1e-5)
        assert b.at[end, "grad_norm"] == pytest.approx(a.at[end, "grad_norm"], abs=1e-5)
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (every, four))
    assert rb["train_loss"] == pytest.approx(ra["train_loss"], abs=1e-5)
    assert rb["tokens_per_step"] == ra["tokens_per_step"]

    workshop("run", "stage2", *RUN, "--output-dir", no_norm, "--max-grad-norm", "0")
    ds = json.loads((no_norm / "ds_config.json").read_text())
    assert (
        ds["zero_optimization"]["compute_grad_norm"] is False
        and "compute_grad_norm" not in json.loads((every / "ds_config.json").read_text())["zero_optimization"]
    )
    c = _log(no_norm)
    assert c["grad_norm"].isna().all() and a["grad_norm"].notna().all()  # no norm computed, none logged
    assert c["loss"].iloc[-3:].mean() < c["loss"].iloc[:3].mean()
