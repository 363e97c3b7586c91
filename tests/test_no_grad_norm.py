"""--max-grad-norm 0 (DeepSpeed's compute_grad_norm false), real DeepSpeed on the CPU: no gradient norm computed nor
logged, and the run still trains."""

import json

import pandas as pd
import pytest

from conftest import skip_unless_runnable, workshop

RUN = ["--tiny", "--max-steps", "8", "--save-strategy", "no", "--save-model", "false"]


def _log(out):
    return pd.read_csv(out / "train_log.csv").dropna(subset=["loss"]).set_index("step")


@pytest.mark.slow
def test_max_grad_norm_0_computes_no_gradient_norm_and_still_trains(tmp_path):
    skip_unless_runnable("stage2")
    every, no_norm = tmp_path / "every", tmp_path / "no_norm"
    workshop("run", "stage2", *RUN, "--output-dir", every)
    workshop("run", "stage2", *RUN, "--output-dir", no_norm, "--max-grad-norm", "0")
    ds = json.loads((no_norm / "ds_config.json").read_text())
    assert (
        ds["zero_optimization"]["compute_grad_norm"] is False
        and "compute_grad_norm" not in json.loads((every / "ds_config.json").read_text())["zero_optimization"]
    )
    a, c = _log(every), _log(no_norm)
    assert c["grad_norm"].isna().all() and a["grad_norm"].notna().all()  # no norm computed, none logged
    assert c["loss"].iloc[-3:].mean() < c["loss"].iloc[:3].mean()
