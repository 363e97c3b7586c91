"""The failure drills of `lessons.drills`, each run for real: the planted massive activation (fast, no DeepSpeed),
the fp16 loss-scale collapse against bf16 on real DeepSpeed engines in this process, and the batch-size
assertion of a real 2-rank torch.distributed.run launch. The DeepSpeed tests are marked slow (pyproject's
`slow` mark); on 2 shared CPU cores: planting ~5 s, fp16/bf16 ~20-40 s per route, each launch ~25-30 s."""

import math
import os

import pytest
import torch

from workshop_lessons import drills
from workshop_lib import teardown
from workshop_lib.model import load_model_and_tokenizer


def test_planted_activation_overflows_fp16_only_in_the_activations():
    torch.manual_seed(0)
    model, tok, _ = load_model_and_tokenizer(tiny=True)
    batch = drills.squad_batch(tok)
    info = drills.plant_massive_activation(model, batch, value=1e5)
    fp16_max = torch.finfo(torch.float16).max
    assert info["fp16_max"] == fp16_max
    assert info["max_abs_hidden"] == pytest.approx(1e5, rel=1e-4)
    # the first token of each prompt, and no other, crosses fp16's range; the weights stay far inside it
    assert info["positions_over_fp16_max"] == len(batch["input_ids"])
    assert info["max_abs_weight"] < 100 and info["times_median"] > 1e4
    with torch.no_grad():
        assert all(torch.isfinite(p.half()).all() for p in model.parameters())
        assert math.isfinite(model.to(torch.bfloat16)(**batch).loss.item())
        assert math.isnan(model.to(torch.float16)(**batch).loss.item())


@pytest.mark.slow
@pytest.mark.parametrize("route", ["auto", "scaler"])  # scaler: the route of CPUs whose DeepSpeed refuses fp16
def test_fp16_loss_scale_collapses_while_bf16_trains(route):
    from deepspeed.accelerator import get_accelerator

    before = {k: os.environ.get(k) for k in teardown.DIST_VARS}
    df = drills.fp16_overflow(steps=20, route=route)
    assert {k: os.environ.get(k) for k in teardown.DIST_VARS} == before  # no MASTER_PORT left for later subprocesses
    assert df.attrs["route"] == ("engine" if route == "auto" and get_accelerator().is_fp16_supported() else "scaler")
    assert df.attrs["fp16_supported"] == get_accelerator().is_fp16_supported()
    f16, b16 = df[df.precision == "fp16"], df[df.precision == "bf16"]
    cfg = df.attrs["fp16_config"]
    start, hysteresis, floor = 2.0 ** cfg["initial_scale_power"], cfg["hysteresis"], cfg["min_loss_scale"]

    # every fp16 step overflowed (NaN loss from the inf activation) and was skipped
    assert f16.overflow.all() and f16.skipped.all() and f16.loss.apply(lambda v: not math.isfinite(v)).all()
    # the scale DeepSpeed used at step i: forgiven `hysteresis - 1` times, then halved per step down to the floor
    expected = [max(start / 2 ** max(0, i - (hysteresis - 1)), floor) for i in range(len(f16))]
    assert f16.loss_scale.tolist() == expected
    k = int(f16.skipped.sum())
    assert f16.loss_scale.iloc[0] / f16.loss_scale.iloc[-1] >= 2 ** (k - hysteresis)
    # at the floor DeepSpeed gives up, with its own words, on the step after the scale reached it
    assert len(f16) == math.log2(start / floor) + hysteresis < 20
    assert df.attrs["fp16_error"].startswith("Current loss scale already at minimum - cannot decrease scale anymore")
    assert f16.error.iloc[-1] == df.attrs["fp16_error"] and (f16.error.iloc[:-1] == "").all()

    # bf16: the same model and data, every step taken, finite losses, falling
    assert len(b16) == 20 and not b16.overflow.any() and not b16.skipped.any()
    assert b16.loss.apply(math.isfinite).all() and (b16.loss_scale == 1).all()
    assert b16.loss.iloc[-1] < b16.loss.iloc[0]

    # the first and last loss scale notebook 03d's summary table shows: the start, then the floor
    assert (f16.loss_scale.iloc[0], f16.loss_scale.iloc[-1]) == (start, floor)

    import matplotlib

    matplotlib.use("Agg")
    ax = drills.plot_fp16_overflow(df)
    assert ax.get_yscale() == "log" and "loss scale" in ax.get_ylabel() and ax.get_xlabel() == "optimizer step"
    assert any("fp16" in t.get_text() for t in ax.get_legend().get_texts())
    matplotlib.pyplot.close(ax.figure)


@pytest.mark.slow
def test_batch_size_mismatch_fails_with_deepspeeds_assertion_and_the_fix_runs():
    before = {k: os.environ.get(k) for k in teardown.DIST_VARS}
    bad = drills.batch_size_mismatch(fixed=False, micro=4, accum=4, nproc=2)
    assert bad["returncode"] != 0 and bad["config"]["train_batch_size"] == 16
    assert bad["error_lines"] and all(
        ln.startswith(
            "AssertionError: Check batch related parameters. train_batch_size is not equal to "
            "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 4 * 4 * 2"
        )
        for ln in bad["error_lines"]
    )
    assert bad["arithmetic"] == "16 != 4 x 4 x 2 = 32"
    assert bad["fixed_config"] == {
        "train_batch_size": 32,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 4,
        "world_size": 2,
    }
    assert "torch.distributed.run --nproc_per_node 2" in bad["command"]

    good = drills.batch_size_mismatch(fixed=True, micro=4, accum=4, nproc=2)
    assert good["returncode"] == 0 and good["error_lines"] == [] and good["config"]["train_batch_size"] == 32
    assert good["output_lines"] and "train_batch_size 32 = 4 x 4 x 2; 1 optimizer step" in good["output_lines"][0]
    assert {k: os.environ.get(k) for k in teardown.DIST_VARS} == before
