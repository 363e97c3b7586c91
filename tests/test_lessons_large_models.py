"""Notebook 03c's reference table and choices, read from the committed GPU runs (workshop_lessons/reference/h100/large-models,
workshop_lessons/reference/h200/large-models-x2): each run's outcome from its own files, the estimate beside it."""

import json
from dataclasses import replace

import pytest

from workshop_lessons import band
from workshop_lessons import large_models as lm
from workshop_lessons.baseline import speed_band
from workshop_lib import fit
from workshop_lib.errors import WorkshopError
from workshop_lib.fit import GPUS, HEADROOM, check_fits, estimate, fix_on_these_gpus, states_fit
from workshop_lib.results import title

H100 = lm.REFERENCES["one H100 80GB, 128 GiB host"]
X2 = lm.REFERENCES["two H200 141GB, 256 GiB host"]


def test_each_reference_run_says_how_it_ended():
    df = lm.reference_runs(H100).set_index(["model", "experiment", "activation checkpointing"])
    assert df.loc[("Qwen/Qwen3-4B", "stage3_offload", False), "outcome"] == "trained"
    assert df.loc[("Qwen/Qwen3-4B", "baseline", True), "outcome"] == "trained"
    assert df.loc[("Qwen/Qwen3-4B", "baseline", False), "outcome"].startswith(
        "The GPU ran out of memory during baseline"
    )
    # the preflight's refusal, written when its margin was 90% of the GPU; the one margin is now 85% (fit.HEADROOM),
    # and those states refuse under both
    assert "more than 90% of this GPU's 81,079 MiB" in df.loc[("Qwen/Qwen3-4B", "stage2", False), "outcome"]
    states = df.loc[("Qwen/Qwen3-4B", "stage2", False), "est. states GPU MiB"]
    assert states > 0.9 * 81_079 and not states_fit(states, 81_079)
    assert df.loc[("Qwen/Qwen3-8B", "stage3_offload", False), "outcome"].startswith(
        "killed, no error written (host RSS 126,568"
    )
    # the estimate beside a run is fit.estimate for its settings
    row = df.loc[("Qwen/Qwen3-4B", "stage3_offload", False)]
    assert row["est. total GPU MiB"] == estimate("Qwen/Qwen3-4B", 3, "cpu", max_length=8192)["total_gpu_mib"]
    assert row["steady tokens/s"] > 0 and row["host peak RSS MiB, node"] > row["est. states GPU MiB"]


def test_host_memory_is_compared_per_node_like_the_estimate():
    """Two ranks on one node: the table's host memory is both ranks' peaks summed (each process holds its own
    partition of the offloaded states), as DeepSpeed's host estimate is per node; one rank: its own."""
    x2 = lm.reference_runs(X2).set_index("experiment")
    r = json.loads((X2 / "runs" / "Qwen3-8B-stage3_offload" / "results.json").read_text())
    ranks = r["per_rank_memory"]
    assert len(ranks) == 2 and len({x["host"] for x in ranks}) == 1
    node = x2.at["stage3_offload", "host peak RSS MiB, node"]
    assert node == round(sum(x["host_peak_rss_mib"] for x in ranks), 1) > 1.9 * r["host_peak_rss_mib"]
    est = estimate("Qwen/Qwen3-8B", 3, "cpu", gpus_per_node=2, max_length=8192, activation_checkpointing=True)
    assert x2.at["stage3_offload", "est. states host MiB, node"] == est["model_states_cpu_mib"]
    assert node < est["model_states_cpu_mib"]  # like for like: under DeepSpeed's budget (18 bytes/param x 1.5)
    one = lm.reference_runs(H100).set_index(["model", "experiment", "activation checkpointing"])
    off = lm.reference_result("stage3_offload")
    assert one.loc[("Qwen/Qwen3-4B", "stage3_offload", False), "host peak RSS MiB, node"] == off["host_peak_rss_mib"]


def test_reserved_but_unallocated_in_the_reference():
    """03c's example of the caching allocator: Qwen3-4B ZeRO-3 + CPU offload on the H100, whose NVML peak is far
    above the estimate while PyTorch's live tensors stayed near it; the difference is reserved, unallocated."""
    a = lm.allocator_cache()
    r = json.loads((H100 / "runs" / "Qwen3-4B-stage3_offload" / "results.json").read_text())
    assert (a.model, a.allocated_mib, a.reserved_mib, a.nvml_mib) == (
        "Qwen/Qwen3-4B",
        r["gpu_peak_allocated_mib"],
        r["gpu_peak_reserved_mib"],
        r["gpu_peak_mib"],
    )
    assert a.estimate_mib == estimate("Qwen/Qwen3-4B", 3, "cpu", max_length=8192)["total_gpu_mib"]
    assert a.cached_mib == a.reserved_mib - a.allocated_mib > 0.3 * a.reserved_mib  # over a third of it cache
    assert abs(a.allocated_mib / a.estimate_mib - 1) < 0.1 < a.nvml_vs_estimate.ratio - 1
    assert a.nvml_vs_estimate.verdict == "higher" and a.nvml_mib > 0.9 * a.gpu_mib


def test_largest_trained_model_per_experiment_on_each_machine():
    assert lm.largest_trained(lm.reference_runs(H100)) == {
        "baseline": "Qwen/Qwen3-4B",
        "stage3_offload": "Qwen/Qwen3-4B",
    }
    x2 = lm.reference_runs(X2)
    assert set(x2["GPUs"]) == {2}
    assert lm.largest_trained(x2) == {"stage3": "Qwen/Qwen3-8B", "stage3_offload": "Qwen/Qwen3-8B"}


def _tells_the_story(c):
    """The notebook's cells as the choice promises them: the baseline and ZeRO-2 above the GPU's memory (they
    raise), ZeRO-3 + CPU offload within 1 - HEADROOM of it and its host states within HOST_SHARE of the host."""
    assert c.baseline["total_gpu_mib"] > c.gpu_mib and c.stage2["total_gpu_mib"] > c.gpu_mib
    assert c.offload["total_gpu_mib"] <= (1 - HEADROOM) * c.gpu_mib and c.offload["fits"]
    assert c.offload["model_states_cpu_mib"] <= lm.HOST_SHARE * c.host_mib
    for name, e in (("baseline", c.baseline), ("stage2", c.stage2), ("offload", c.offload)):
        assert e["config"]["model"] == c.model and e["config"]["max_length"] == c.max_tokens, name


def test_the_model_that_does_not_fit_is_picked_from_the_estimates():
    """03c's choice on the three machines it must hold on: the H100 (80 GB, 128 GiB host: machine-call*.txt), an
    H200 with 128 GiB of host memory, and a laptop without a GPU."""
    h100 = lm.pick_model(GPUS["H100 80GB"], lm.REFERENCE_HOST_MIB)
    assert (h100.model, h100.max_tokens, h100.here) == ("Qwen/Qwen3-4B", 8192, True)
    _tells_the_story(h100)
    # the reference runs agree: that baseline ran out of memory, that offload run trained
    df = lm.reference_runs(H100).set_index(["model", "experiment", "activation checkpointing"])
    assert df.loc[("Qwen/Qwen3-4B", "stage3_offload", False), "outcome"] == "trained"
    assert df.loc[("Qwen/Qwen3-4B", "baseline", False), "outcome"].startswith("The GPU ran out of memory")
    # 8B: the GPU side fits with offload, its host states (~206 GiB) do not fit 128 GiB
    e8 = lm.configurations("Qwen/Qwen3-8B", GPUS["H100 80GB"], lm.REFERENCE_HOST_MIB).set_index("experiment")
    assert not e8.at["stage3_offload", "fits"] and e8.at["stage3_offload", "states host MiB"] > lm.REFERENCE_HOST_MIB
    # an H200 with 128 GiB of host: 8B's offloaded states do not fit its host, and 4B's baseline fits its GPU at
    # 8,192 tokens; at 16,384 it does not, and offload still fits both
    h200 = lm.pick_model(GPUS["H200 141GB"], 128 * 1024)
    assert (h200.model, h200.max_tokens, h200.here) == ("Qwen/Qwen3-4B", 16384, True)
    _tells_the_story(h200)
    assert estimate("Qwen/Qwen3-4B", None, "none", max_length=8192)["total_gpu_mib"] < GPUS["H200 141GB"]
    # a laptop: the reference machine's choice, and the notebook's estimate cells raise
    laptop = lm.pick_model(None, 16 * 1024)
    assert not laptop.here and (laptop.model, laptop.max_tokens) == (h100.model, h100.max_tokens)
    assert (laptop.gpu_mib, laptop.host_mib) == (GPUS[lm.REFERENCE_GPU], lm.REFERENCE_HOST_MIB)
    for stage in (None, 2):
        with pytest.raises(WorkshopError):
            check_fits(
                model=laptop.model,
                zero_stage=stage,
                offload="none",
                max_length=laptop.max_tokens,
                gpu=lm.nearest_gpu(laptop.gpu_mib),
            )
    # a host with room for 8B's offloaded states: the pick follows
    assert lm.pick_model(GPUS["H200 141GB"], 256 * 1024).model == "Qwen/Qwen3-8B"
    # a GPU where nothing tells the story (8 GB, 16 GiB host): the reference machine's, not a model that trains
    assert not lm.pick_model(GPUS["laptop GPU 8GB"], 16 * 1024).here


def test_host_states_from_results():
    """Exercise 1 of 03c on the H100 reference run's results.json: the table a learner sees (their run, the
    reference under it), whose bytes/param against DeepSpeed's estimate the answer is written from."""
    off = lm.reference_result("stage3_offload")
    assert off["model"] == "Qwen/Qwen3-4B"
    t = lm.exercise_table(off)
    assert list(t["run"]) == ["stage3_offload", "stage3_offload"]
    assert list(t["measured"]) == ["yours", f"reference ({lm.H100})"]
    mine = t.iloc[0]
    assert mine["model"] == "Qwen/Qwen3-4B" and mine[title("gpu_peak_mib")] == off["gpu_peak_mib"]
    assert mine["host bytes/param after step 1"] == off["host_states_rss_mib"] * 2**20 / off["num_params"]
    assert abs(mine["est. host states bytes/param"] - 27) < 0.01  # 18 bytes/param x 1.5
    assert mine["host bytes/param after step 1"] < mine["est. host states bytes/param"]  # below the estimate


def test_checkpointing_against_offload_in_the_reference():
    """The ladder's first rung for Qwen3-4B on one H100 (activation checkpointing) against ZeRO-3 + CPU offload,
    both trained by the reference: checkpointing was the faster by several times (its blocks compiled, offload's
    not: the table says so, and a learner's uncompiled pair is not compared with it within a band)."""
    r = lm.checkpointing_against_offload()
    df = lm.reference_runs(H100).set_index(["model", "experiment", "activation checkpointing"])
    assert r.model == "Qwen/Qwen3-4B" and not r.tiny and r.device.startswith("NVIDIA H100")
    assert r.rung == "HF Trainer (torch AdamW) + activation checkpointing" and r.torch_compile == (True, False)
    assert (r.tokens_per_second.value, r.tokens_per_second.other) == (
        df.loc[("Qwen/Qwen3-4B", "baseline", True), "steady tokens/s"],
        df.loc[("Qwen/Qwen3-4B", "stage3_offload", False), "steady tokens/s"],
    )
    assert r.tokens_per_second.band == band("steady_train_tokens_per_second")  # a GPU run's band
    assert r.tokens_per_second.verdict == "higher" and r.tokens_per_second.ratio > 3
    # against itself: like for like, within twice the band; against an uncompiled pair: no band, a plain verdict
    same = lm.ratio_against_reference(r, r)
    assert same.ratio == 1 and same.verdict == "within the band" and same.band == 2 * r.tokens_per_second.band
    uncompiled = replace(r, torch_compile=(False, False))
    assert not lm.like_for_like(uncompiled, r) and lm.ratio_against_reference(uncompiled, r).band is None
    t = lm.rung_ratios(None, r)
    assert list(t["measured"]) == [f"reference ({lm.H100})"] and t["rung / offload"].iloc[0] == round(
        r.tokens_per_second.ratio, 2
    )


def test_the_rung_trained_beside_offload_is_the_first_change_that_fits_these_gpus():
    """03c trains the first rung that fits its model on the GPU at hand where that rung is activation checkpointing
    without offload (the H100 reference's, an H200's, and a laptop's, which takes the reference machine's), and
    none where the first rung that fits these GPUs offloads."""
    for gpu_mib, host_mib in (
        (GPUS["H100 80GB"], lm.REFERENCE_HOST_MIB),
        (GPUS["H200 141GB"], 128 * 1024),
        (None, 16 * 1024),
    ):
        c = lm.pick_model(gpu_mib, host_mib)
        est = estimate(
            c.model, None, "none", max_length=c.max_tokens, gpu=lm.nearest_gpu(c.gpu_mib), host_memory_mib=c.host_mib
        )
        rung = lm.checkpointing_rung(est)
        assert (rung.experiment, rung.name) == ("baseline", "baseline_ac")
        assert fix_on_these_gpus(est)["change"] == "HF Trainer (torch AdamW) + activation checkpointing"
    # Qwen3-8B on one H100: nothing without offload fits one GPU, so no rung to train beside offload
    assert lm.checkpointing_rung(estimate("Qwen/Qwen3-8B", None, "none", max_length=8192, gpu="H100 80GB")) is None


def test_both_rungs_trained_here_give_the_ratio_from_their_results(tiny_runs, tmp_path, run_cli):
    """03c's two runs on this machine with the tiny model, as the notebook makes them without a GPU: the rung
    `checkpointing_rung` picks (baseline + activation checkpointing) and ZeRO-3 + CPU offload, same micro-batches,
    a few steps each. The ratio is the two results.json's steady tokens/s, with this machine's band."""
    est = estimate("Qwen/Qwen3-4B", None, "none", max_length=8192, gpu="H100 80GB")
    rung = lm.checkpointing_rung(est)
    ac, off = tmp_path / rung.name, tiny_runs / "stage3_offload"
    run_cli("run", rung.experiment, "--tiny", "--activation-checkpointing", "true", "--output-dir", ac)
    a, b = (json.loads((d / "results.json").read_text()) for d in (ac, off))
    assert a["config"]["activation_checkpointing"] and a["global_steps"] == b["global_steps"]
    r = lm.rung_against_offload(ac, off)
    t = r.tokens_per_second
    assert (t.value, t.other) == (a["steady_train_tokens_per_second"], b["steady_train_tokens_per_second"])
    assert t.ratio == a["steady_train_tokens_per_second"] / b["steady_train_tokens_per_second"]
    assert t.band == speed_band(a) and r.tiny and r.device == a["device"]
    assert r.rung == fix_on_these_gpus(est)["change"] and r.torch_compile == (
        a["config"]["torch_compile"],
        b["config"]["torch_compile"],
    )
    # beside the H100 reference: another model and machine, so no band, whatever the two ratios
    v = lm.ratio_against_reference(r, lm.checkpointing_against_offload())
    assert v.band is None and v.ratio == t.ratio / lm.checkpointing_against_offload().tokens_per_second.ratio
    assert list(lm.rung_ratios(r, None)["rung / offload"]) == [round(t.ratio, 2)]
    # a pair of runs with other micro-batches is refused, not compared
    other = tmp_path / "other"
    other.mkdir()
    (other / "results.json").write_text(json.dumps(b | {"config": b["config"] | {"max_tokens_per_micro_batch": 1}}))
    with pytest.raises(WorkshopError, match="different models or micro-batches"):
        lm.rung_against_offload(ac, other)


def test_the_h200_reference_is_read_against_h100s_like_for_like():
    """03c's exercise 3: the two-H200 run of Qwen3-8B (ZeRO-3, activation checkpointing) against two H100s by
    PyTorch's peak allocated and by the estimate, each against what an H100 leaves a run (1 - HEADROOM of its
    memory), not by NVML's peak, which counts the cache of a 141 GB card. Both say two H100s are too few: the
    estimate's answer for one H100's Qwen3-8B is ZeRO-3 + activation checkpointing on 4 of them (it was 2 when
    "fits" meant the whole card, the estimate then at 95% of each)."""
    r = lm.on_h100s("stage3")
    ran = json.loads((X2 / "runs" / "Qwen3-8B-stage3" / "results.json").read_text())
    assert (r.model, r.gpus, r.allocated_mib, r.nvml_mib) == (
        "Qwen/Qwen3-8B",
        2,
        ran["gpu_peak_allocated_mib"],
        ran["gpu_peak_mib"],
    )
    assert r.tokens_per_second == ran["steady_train_tokens_per_second"] and r.gpu_mib == GPUS["H100 80GB"]
    assert r.usable_mib == (1 - HEADROOM) * GPUS["H100 80GB"]
    two = estimate("Qwen/Qwen3-8B", 3, "none", gpus_per_node=2, max_length=8192, activation_checkpointing=True)
    assert r.estimate_mib == two["total_gpu_mib"] and r.estimate_fits == two["fits"] is False
    assert r.allocated_mib > r.usable_mib and not r.fits  # measured: past the share, as the estimate says
    assert r.nvml_mib < r.gpu_mib  # the old comparison, NVML on the H200 against the whole H100, said it fit
    h100 = estimate("Qwen/Qwen3-8B", 3, "cpu", max_length=8192, host_memory_mib=lm.REFERENCE_HOST_MIB)
    fix = fit.smallest_fix(h100)["config"]
    assert (fix["zero_stage"], fix["offload"], fix["activation_checkpointing"], fix["gpus_per_node"]) == (
        3,
        "none",
        True,
        4,
    )
