"""workshop_lib.fit, the "will it fit?" estimate: its model states against DeepSpeed's estimators called here,
its activations against the paper's formula and a count by hand, its verdicts and advice against its own
numbers, its errors, and the explorer widget. Fast: parameter counts on the meta device, no training."""

import json
import os

os.environ.setdefault("MPLBACKEND", "Agg")  # before matplotlib is imported: no display needed

import matplotlib.pyplot as plt
import pytest
from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

from workshop_lessons import REFERENCE
from workshop_lib.errors import WorkshopError
from workshop_lib.fit import (
    GPUS,
    HEADROOM,
    LABELLED_FRACTION,
    check_fits,
    estimate,
    explain,
    fix_on_these_gpus,
    ladder,
    layer_activation_bytes,
    model_shape,
    plot,
    qwen3_constants,
    smallest_fix,
    states_fit,
)
from workshop_lib.model import count_params
from workshop_lib.units import MiB

H100 = GPUS["H100 80GB"]
USABLE = (1 - HEADROOM) * H100  # what a run may fill of an H100 by fit's one margin


@pytest.mark.parametrize(
    "model, zero_stage, offload, gpus_per_node, nodes",
    [
        ("Qwen/Qwen3-4B", 3, "cpu", 1, 1),  # the workshop's stage3_offload: optimizer and parameters on the CPU
        ("Qwen/Qwen3-8B", 3, "none", 2, 1),
        ("Qwen/Qwen3-1.7B", 2, "none", 4, 2),
        ("Qwen/Qwen3-1.7B", 2, "cpu", 4, 2),  # stage 2 offloads the optimizer only
    ],
)
def test_model_states_are_deepspeeds_estimate(model, zero_stage, offload, gpus_per_node, nodes):
    p = count_params(model)
    if zero_stage == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            p["num_params"],
            p["largest_layer_params"],
            gpus_per_node,
            nodes,
            cpu_offload=offload == "cpu",
            cpu_offload_params=offload == "cpu",
        )
    else:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            p["num_params"], gpus_per_node, nodes, cpu_offload=offload == "cpu"
        )
    est = estimate(model, zero_stage, offload, gpus_per_node, nodes)
    assert est["num_params"] == p["num_params"]
    assert (est["model_states_gpu_mib"], est["model_states_cpu_mib"]) == (round(gpu / MiB, 1), round(cpu / MiB, 1))
    assert est["estimator"] == f"estimate_zero{zero_stage}_model_states_mem_needs"


def test_every_experiment_is_an_estimate_setup():
    """`Experiment.fit_setup` is what fit.estimate models: at stage 3 its offload moves the optimizer states and
    the parameters together, so an experiment that offloads one without the other would be estimated wrongly."""
    from workshop_lib.ds_config import EXPERIMENTS

    for name, exp in EXPERIMENTS.items():
        if exp.zero_stage == 3:
            assert exp.offload_param == exp.offload_optimizer, name
        else:
            assert exp.offload_param == "none", name
        assert estimate("Qwen/Qwen3-0.6B", **exp.fit_setup)["config"]["offload"] == exp.offload_optimizer


def test_layer_activations_are_the_papers_eq1():
    # Korthikanti et al. 2022, eq. 1, for GPT-3 175B (s=2048, h=12288, a=96), one sequence:
    # s·b·h = 2048 x 12288 = 25,165,824; 34 + 5·a·s/h = 34 + 5 x 96 x 2048 / 12288 = 34 + 80 = 114.
    assert layer_activation_bytes(2048, 1, 12288, 96, flash_attention=False) == 25_165_824 * 114
    assert layer_activation_bytes(2048, 1, 12288, 96, flash_attention=True) == 25_165_824 * 34  # no a·s·s scores


def test_qwen3_4b_activations_by_hand():
    # Qwen3-4B: h=2560, 32 query heads and 8 key/value heads of 128 (widths 4096 and 1024), MLP 9728, 36 layers.
    # Bytes per token per layer, tensor by tensor, as transformers' Qwen3 keeps them (seen on an H100):
    norms = 2 * (4 * 2560 + 2 * 2560 + 2 * 2560)  # fp32 input, bf16 normalised, weighted output: 40,960
    qk_norms = (4 + 2) * 4096 + (4 + 2) * 1024  # fp32 input and bf16 normalised: 30,720
    sdpa = 2 * 4096 + 2 * 1024 + 2 * 1024 + 2 * 4096 + 4 * 32  # Q, K, V, output, fp32 logsumexp: 20,608
    mlp = 4 * 2 * 9728  # gate output, SiLU output, up output, down_proj input: 77,824
    per_token = norms + qk_norms + sdpa + mlp
    assert per_token == 170_112
    shape = model_shape("Qwen/Qwen3-4B")
    assert qwen3_constants(shape, flash_attention=True) == (per_token / 2560, 6)
    tokens = 2 * 4096  # micro-batch 2 of 4096 tokens
    final_norm = 8 * tokens * 2560
    est = estimate("Qwen/Qwen3-4B", train_micro_batch_size_per_gpu=2, max_length=4096)
    assert est["activations_gpu_mib"] == round((36 * per_token * tokens + final_norm) / MiB, 1)  # 48,004 MiB
    # Checkpointing keeps each layer's bf16 input, and recomputes one layer at a time in the backward pass.
    ckpt = estimate("Qwen/Qwen3-4B", train_micro_batch_size_per_gpu=2, max_length=4096, activation_checkpointing=True)
    assert ckpt["activations_gpu_mib"] == round((36 * 2 * tokens * 2560 + per_token * tokens + final_norm) / MiB, 1)
    # Eager attention: Q copied, K and V repeated to all 32 heads, o_proj's input; fp32 softmax + its bf16 copy.
    eager = norms + qk_norms + 4 * 2 * 4096 + mlp + (4 + 2) * 32 * 4096
    est = estimate("Qwen/Qwen3-4B", max_length=4096, flash_attention=False)
    assert est["activations_gpu_mib"] == round((36 * eager * 4096 + 8 * 4096 * 2560) / MiB, 1)
    # Logits: 2 bytes bf16 + 4 bytes fp32 per vocabulary entry, for every token or for the labelled 3%.
    assert est["logits_gpu_mib"] == round(4096 * 151_936 * 6 * LABELLED_FRACTION / MiB, 1)
    assert estimate(logits_on="all")["logits_gpu_mib"] == round(4096 * 151_936 * 6 / MiB, 1)  # 3,561 MiB


def test_verdicts_follow_from_the_numbers():
    trainer = estimate("Qwen/Qwen3-8B", zero_stage=None, offload="none")
    assert trainer["model_states_gpu_mib"] == round(16 * 8_190_735_360 / MiB, 1) == 124_980.7  # 122 GiB
    assert trainer["model_states_gpu_mib"] > H100 and not trainer["fits"]
    offload = estimate("Qwen/Qwen3-8B", zero_stage=3, offload="cpu")
    total = offload["model_states_gpu_mib"] + offload["activations_gpu_mib"] + offload["logits_gpu_mib"]
    assert offload["total_gpu_mib"] == pytest.approx(total, abs=0.1) and total <= USABLE and offload["fits"]
    assert offload["usable_gpu_mib"] == round(USABLE, 1) and offload["spare_mib"] == pytest.approx(
        USABLE - total, abs=0.1
    )
    assert offload["model_states_cpu_mib"] == round(18 * 1.5 * 8_190_735_360 / MiB, 1)  # DeepSpeed's host column
    small_host = estimate("Qwen/Qwen3-8B", zero_stage=3, offload="cpu", host_memory_mib=100_000)
    assert small_host["total_gpu_mib"] == offload["total_gpu_mib"] and not small_host["fits"]


def _setup(config: dict) -> tuple:
    return (
        config["zero_stage"],
        config["offload"],
        config["activation_checkpointing"],
        config["gpus_per_node"],
        config["nodes"],
        config["train_micro_batch_size_per_gpu"],
        config["max_length"],
    )


def test_the_ladder_is_the_courses_order():
    """The course's own order (not HF's guide's, tests/test_docs.py): smaller micro-batch and activation
    checkpointing first, then ZeRO stages on these GPUs and more, every one before any offload,
    shorter sequences at the very end."""
    rungs = ladder(estimate("Qwen/Qwen3-8B", None, "none", train_micro_batch_size_per_gpu=4)["config"])
    first_offload = next(i for i, r in enumerate(rungs) if r["offload"] != "none")
    first_zero = next(i for i, r in enumerate(rungs) if r["zero_stage"] is not None)
    assert [(r["train_micro_batch_size_per_gpu"], r["activation_checkpointing"]) for r in rungs[:first_zero]] == [
        (2, False),
        (1, False),
        (4, True),
        (2, True),
        (1, True),
    ]
    assert all(r["activation_checkpointing"] for r in rungs[first_zero:])
    assert {r["offload"] for r in rungs[first_zero:first_offload]} == {"none"}  # every world without offload first
    assert {r["zero_stage"] for r in rungs[first_zero:first_offload]} == {2, 3}  # ZeRO-3 before ZeRO-2 + offload
    assert max(r["gpus_per_node"] * r["nodes"] for r in rungs[first_zero:first_offload]) == 128
    assert {r["offload"] for r in rungs[first_offload:]} == {"cpu"}
    assert [r["max_length"] for r in rungs if r["max_length"] != 4096] == [2048, 1024, 512, 256]  # the last rungs
    assert [r["max_length"] for r in rungs[-4:]] == [2048, 1024, 512, 256]


def test_qwen3_4b_on_one_h100_needs_activation_checkpointing_only():
    """03c's model: the baseline with checkpointing fits (64,521 MiB, the estimate beside the reference run that
    trained it at 11,998 tokens/s, workshop_lessons/reference/h100/large-models), before any ZeRO stage or offload."""
    est = estimate("Qwen/Qwen3-4B", None, "none", max_length=8192, host_memory_mib=128 * 1024)
    assert not est["fits"]
    fix = smallest_fix(est)
    assert _setup(fix["config"]) == (None, "none", True, 1, 1, 1, 8192)
    # the reference run with these settings trained, PyTorch's peak within 2% under the estimate
    ran = json.loads((REFERENCE / "h100/large-models/runs/Qwen3-4B-baseline-ac/results.json").read_text())
    assert fix["estimate"]["fits"] and 0.98 < ran["gpu_peak_allocated_mib"] / fix["estimate"]["total_gpu_mib"] < 1
    assert f"Smallest change that fits: {fix['change']}" in explain(est)
    with pytest.raises(WorkshopError) as e:
        check_fits(model="Qwen/Qwen3-4B", zero_stage=None, offload="none", max_length=8192)
    total = fix["estimate"]["total_gpu_mib"]
    assert str(e.value).endswith(f"To fix: {fix['change']} fits (~{total:,.0f} MiB per GPU).")


def test_fits_means_within_the_headroom_not_within_the_card():
    """One margin: Qwen3-8B with ZeRO-3 + activation checkpointing on 2 x H100 (micro-batches of 8,192 tokens)
    fills about 95% of each card by the estimate: under the card's memory, over the 85% a run may fill, so it does
    not fit; its states alone (about 89%) pass that share too, so the preflight refuses it as well. explain and
    check_fits give the share, and the plot's line is drawn at it."""
    two = estimate("Qwen/Qwen3-8B", 3, "none", gpus_per_node=2, max_length=8192, activation_checkpointing=True)
    assert USABLE < two["total_gpu_mib"] < H100 and not two["fits"]
    assert USABLE < two["model_states_gpu_mib"] and not states_fit(two["model_states_gpu_mib"], H100)
    assert f"of the {USABLE:,.0f} MiB a run may fill ({1 - HEADROOM:.0%} of {H100:,} MiB)" in explain(two)
    with pytest.raises(WorkshopError, match=r"more than 85% of the H100 80GB's 81,559 MiB \(15% kept as headroom\)"):
        check_fits(**two["config"])
    ax = plot(two)
    assert ax.collections[0].get_segments()[0][0][0] == pytest.approx(USABLE / 1024)  # the GPU's dashed line
    assert "85% of the H100 80GB's memory (15% headroom)" in ax.get_legend_handles_labels()[1]
    plt.close(ax.figure)


def test_qwen3_8b_takes_more_gpus_before_offload():
    """Exercise 3 of 03c: Qwen3-8B with ZeRO-3 + CPU offload on one H100 with 128 GiB does not fit the host
    (210,905 MiB of states); ZeRO-3 with checkpointing on more GPUs comes before any offload: 4 H100s, since on 2
    it fills about 95% of each card, past the 85% a run may fill; on the one GPU nothing fits."""
    est = estimate("Qwen/Qwen3-8B", 3, "cpu", max_length=8192, host_memory_mib=128 * 1024)
    assert est["model_states_cpu_mib"] > 128 * 1024 and not est["fits"]
    fix = smallest_fix(est)
    z, offload, ac, g, n, b, s = _setup(fix["config"])
    assert (z, offload, ac, b, s) == (3, "none", True, 1, 8192) and g * n == 4
    fewer = estimate(**dict(fix["config"], gpus_per_node=g // 2))  # the fewest such GPUs: 2 fit the card, not 85%
    assert not fewer["fits"] and USABLE < fewer["total_gpu_mib"] < H100
    assert fix_on_these_gpus(est) is None
    text = explain(est)
    assert f"Smallest change that fits: {fix['change']}" in text and "GPU you have" not in text


def test_explain_and_smallest_fix_agree_with_estimate():
    est = estimate("Qwen/Qwen3-8B", zero_stage=2, offload="none")
    fix = smallest_fix(est)
    assert estimate(**fix["config"])["fits"] and fix["config"]["offload"] == "none"
    assert all(not estimate(**r)["fits"] for r in ladder(est["config"])[: ladder(est["config"]).index(fix["config"])])
    # Further up: an 8 GB GPU needs activation checkpointing too, on the one GPU the run has (offload kept)
    laptop = smallest_fix(estimate("Qwen/Qwen3-8B", 3, "cpu", gpu="laptop GPU 8GB"))
    assert _setup(laptop["config"])[:4] == (3, "cpu", True, 1)
    assert laptop["estimate"]["total_gpu_mib"] <= laptop["estimate"]["usable_gpu_mib"] == (1 - HEADROOM) * 8192
    fits = explain(estimate("Qwen/Qwen3-4B"))
    assert fits.startswith("Qwen/Qwen3-4B with ZeRO-3 + CPU offload on 1 x H100 80GB fits") and "to spare" in fits


def test_the_verdict_counts_the_workshops_refusal():
    # Qwen3-4B ZeRO-2 with checkpointing: its states (76,722 MiB) alone past 85% of the H100, which the preflight
    # refuses (states_fit), and so past the share the whole estimate must fit
    zero2 = estimate("Qwen/Qwen3-4B", 2, "none", max_length=8192, activation_checkpointing=True)
    assert not states_fit(zero2["model_states_gpu_mib"], H100) and not zero2["fits"]
    with pytest.raises(WorkshopError, match="more than 85% of the H100 80GB's"):
        check_fits(model="Qwen/Qwen3-4B", zero_stage=2, offload="none", max_length=8192, activation_checkpointing=True)


def test_check_fits_raises_with_the_numbers_and_the_fix():
    est = estimate("Qwen/Qwen3-8B", zero_stage=2, offload="none")
    with pytest.raises(WorkshopError) as e:
        check_fits(model="Qwen/Qwen3-8B", zero_stage=2, offload="none")
    fix = smallest_fix(est)
    assert str(e.value) == (
        f"Qwen/Qwen3-8B with ZeRO-2 needs ~{est['total_gpu_mib']:,.0f} MiB per GPU (model states "
        f"{est['model_states_gpu_mib']:,.0f} + activations {est['activations_gpu_mib']:,.0f} + logits "
        f"{est['logits_gpu_mib']:,.0f}), more than 85% of the H100 80GB's 81,559 MiB (15% kept as headroom).\n"
        f"To fix: {fix['change']} fits (~{fix['estimate']['total_gpu_mib']:,.0f} MiB per GPU)."
    )
    assert check_fits(model="Qwen/Qwen3-8B", zero_stage=3, offload="cpu")["fits"]


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"zero_stage": 3, "offload": "nvme"}, "not an option"),  # NVMe offload is not an experiment
        ({"zero_stage": None, "offload": "cpu"}, "HF Trainer alone offloads nothing"),
        ({"zero_stage": 0, "offload": "cpu"}, "ZeRO-0 offloads nothing"),
        ({"zero_stage": 4}, "not an option"),
        ({"offload": "disk"}, "not an option"),
        ({"model": "gpt2"}, "Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B, Qwen/Qwen3-4B, Qwen/Qwen3-8B"),
        ({"gpu": "H100"}, "H100 80GB"),
        ({"max_length": 0}, "max_length=0"),
        ({"train_micro_batch_size_per_gpu": -1}, "train_micro_batch_size_per_gpu=-1"),
        ({"gpus_per_node": 0}, "gpus_per_node=0"),
        ({"nodes": 0}, "nodes=0"),
        ({"host_memory_mib": 0}, "host_memory_mib=0"),
    ],
)
def test_impossible_input_raises_workshop_error(kw, says):
    with pytest.raises(WorkshopError) as e:
        estimate(**kw)
    assert says in str(e.value) and "\nTo fix: " in str(e.value)


def test_plot_without_widgets():
    ax = plot(estimate("Qwen/Qwen3-8B", zero_stage=2, offload="none"))
    assert "GiB" in ax.get_xlabel() and "does not fit" in ax.get_title()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["each GPU", "host, per node"]
    plt.close(ax.figure)


def test_explorer_builds_and_rerenders(capsys):
    from workshop_lessons.large_models import explorer  # 03c's widget over fit.estimate

    figures = plt.get_fignums()  # those other tests in this worker left open
    ui = explorer()  # renders once when built
    assert explain(estimate()) in capsys.readouterr().out
    ui.controls["model"].value = "Qwen/Qwen3-8B"
    assert explain(estimate("Qwen/Qwen3-8B")) in capsys.readouterr().out
    ui.controls["zero_stage"].value = "none"  # with offload cpu, impossible: the message, not a traceback
    out = capsys.readouterr().out
    assert "HF Trainer alone offloads nothing" in out and "\nTo fix: " in out
    ui.controls["offload"].value = "none"
    ui.controls["activation_checkpointing"].value = True
    out = capsys.readouterr().out
    assert explain(estimate("Qwen/Qwen3-8B", None, "none", activation_checkpointing=True)) in out
    assert plt.get_fignums() == figures  # each render closed its figure


def test_one_gpu_table_gives_memory_and_peak_flops_by_device_name():
    """`gpus.CATALOGUE`, the one GPU table: torch's device names find their peak (the specific H100 variants
    before the plain H100), and `fit.GPUS` is its memory column."""
    from workshop_lib import gpus

    assert gpus.peak_flops("NVIDIA H100 80GB HBM3") == 989e12 and gpus.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpus.peak_flops("NVIDIA H100 NVL") == 835e12 and gpus.peak_flops("NVIDIA GH200 480GB") == 989e12
    assert gpus.peak_flops("NVIDIA A100-SXM4-40GB") == 312e12 and gpus.peak_flops("NVIDIA GeForce RTX 4090") is None
    assert GPUS == {g.name: g.memory_mib for g in gpus.CATALOGUE if g.memory_mib} and GPUS["H100 80GB"] == 81559
