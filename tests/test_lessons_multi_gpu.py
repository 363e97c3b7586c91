"""Notebook 04's answers (`workshop_lib.lessons.multi_gpu`) against the runs they were computed from: the
H200 reference runs (docs/h200/default-x4, steady state) standing in as the learner's runs, and a real
two-rank run of the tiny model on this machine (a two-node SLURM job where a cluster answers, as the
notebook makes it; else two local processes). A wrong claim fails here."""

import re
import shutil
import sys

import pandas as pd
import pytest

from workshop_lib import launch, memory
from workshop_lib.lessons import DOCS, multi_gpu
from workshop_lib.results import load_results, scaling_table

P, LARGEST = 596_049_920, 155_582_464  # Qwen3-0.6B
REF = DOCS / "h200" / "default-x4" / "runs"


def _arith():
    f = {0: lambda n: 16 * P, 1: lambda n: 4 * P + 12 * P / n, 2: lambda n: 2 * P + 14 * P / n, 3: lambda n: 16 * P / n}
    return pd.DataFrame([{"GPUs": n, "zero_stage": s, "16Ψ arithmetic MiB": round(g(n) / 2**20),
                          "DeepSpeed estimate MiB": memory.estimate_model_states(P, LARGEST, s, num_gpus_per_node=n)[
                              "estimated_model_states_gpu_mib"]} for n in (1, 2, 4, 8) for s, g in f.items()])


def _check(df, ref):
    """The claims that hold for any runs `df`: every figure recomputed from df here."""
    scaling = scaling_table(df)
    text = multi_gpu.answers(_arith(), scaling, ref, df, P)
    a = _arith().set_index(["GPUs", "zero_stage"])["16Ψ arithmetic MiB"]
    assert f"ZeRO-2: {P * (2 + 14 / 16) / 2**20:,.0f} MiB per GPU on 16 GPUs, {(2 + 14 / 16) / 16:.0%} of the {a[(1, 2)]:,}" in text[0]
    assert f"ZeRO-3: {P / 2**20:,.0f} MiB per GPU on 16 GPUs, {1 / 16:.0%} of the {a[(1, 3)]:,}" in text[1]
    mem = next(c for c in scaling.columns if c.startswith("peak"))
    gpu = mem.startswith("peak GPU")
    for exp, g in scaling.groupby("experiment"):
        d = g.iloc[-1][mem] - g.iloc[0][mem]
        line = next(t for t in text if t.startswith(f"2. {exp}:"))
        assert f"({d:+,.0f} MiB)" in line and f"at {g.iloc[-1].GPUs} ranks" in line
        run = df[df["experiment"] == exp].iloc[0]
        off = tuple(run.get(k) not in (None, "none", False) for k in ("offload_optimizer", "offload_param"))
        fall = run["num_params"] * (multi_gpu.gpu_bytes_per_param(int(run["zero_stage"]), g.iloc[0].GPUs, *off)
                                    - multi_gpu.gpu_bytes_per_param(int(run["zero_stage"]), g.iloc[-1].GPUs, *off)) / 2**20
        assert f"fall by {fall:,.1f} MiB" in line
        if gpu:  # the verdict follows the figures
            want = "about as much as" if abs(d + fall) <= 0.25 * fall else "less than" if -d < fall else "more than"
            assert f": {want} the arithmetic" in line, line
        else:
            assert "cannot be read from host RSS" in line
    eff_line = next(t for t in text if t.startswith("4."))
    effs = [float(r["scaling efficiency"].rstrip("%")) for _, r in scaling[scaling.GPUs > 1].iterrows()]
    for _, r in scaling[scaling.GPUs > 1].iterrows():
        assert f"{r.experiment} x{r.GPUs}: {float(r['scaling efficiency'].rstrip('%')):.0f}%" in eff_line
    if gpu:
        assert ("Below 100%" in eff_line) == all(e < 100 for e in effs)
        assert ("Above 100% is not real speed-up" in eff_line) == any(e >= 100 for e in effs)
    else:
        assert "Not meaningful as a scaling figure" in eff_line
        assert ("above 100% means the one-rank run" in eff_line) == any(e > 100 for e in effs)
    m = multi_gpu.multi_node_row(df)
    node = next(t for t in text if t.startswith("5."))
    assert f"{m['nodes (distinct hosts)']} host(s), {m['ranks']} ranks, {m['tokens/s']:,} tokens/s" in node
    assert ("Between real nodes" in node) == (m["nodes (distinct hosts)"] > 1)
    assert not any(re.search(r"None|nan", t) for t in text)
    return text, m


def test_answers_agree_with_the_h200_runs():
    ref = load_results(REF)
    text, m = _check(ref, ref)
    assert "Below 100%" in next(t for t in text if t.startswith("4."))  # every H200 efficiency is below 100%
    assert (m["nodes (distinct hosts)"], m["ranks"]) == (1, 4) and "on this one machine" in m["source"]
    tps = ref.set_index(["experiment", "world_size"])["steady_train_tokens_per_second"]
    assert m["tokens/s against 1 rank"] == f"{tps[('stage2', 4)] / tps[('stage2', 1)]:.2f}x"


def test_fallback_when_gpu_runs_scale_above_100_percent():
    """The H200 runs with the steady tokens/s of stage2 on 1 GPU and stage3_offload on 1 GPU swapped (a slow
    one-GPU run): the answer must not read the super-linear efficiency as real speed-up."""
    ref = load_results(REF)
    i = ref.index[(ref.experiment == "stage2") & (ref.world_size == 1)][0]
    j = ref.index[(ref.experiment == "stage3_offload") & (ref.world_size == 1)][0]
    col = "steady_train_tokens_per_second"
    ref.loc[[i, j], col] = ref.loc[[j, i], col].to_numpy()
    text, _ = _check(ref, load_results(REF))
    assert "Above 100% is not real speed-up" in next(t for t in text if t.startswith("4."))


def test_reference_note_and_beside_name_the_h200_runs():
    ref = load_results(REF)
    note = multi_gpu.reference_note(ref, "docs/h200/default-x4/runs")
    for exp, g in ref.groupby("experiment"):
        assert f"{exp} x{'/'.join(map(str, sorted(g.world_size)))}" in note
    assert f"{int(ref.global_steps.iloc[0])} optimizer steps" in note and "H200" in note
    assert "No H200 reference" in multi_gpu.reference_note(None, "nowhere")
    table = multi_gpu.beside(scaling_table(ref), ref)
    assert (table["steady tokens/s"] == table["steady tokens/s (H200 ref)"]).all()


@pytest.fixture(scope="module")
def two_ranks(tiny_runs, tmp_path_factory):
    """The tiny stage2 on one rank (tiny_runs) and on two: a two-node SLURM job where a cluster answers (as
    notebook 04 makes it), else two processes here; 4 optimizer steps."""
    out = tmp_path_factory.mktemp("ranks") / "stage2-2"
    args = ["--tiny", "--max-steps", "4"]
    if launch.slurm_available():
        job = launch.submit("multi_node", "stage2", *args, sbatch_options=("--nodes=2", "--gpus-per-node=0"),
                            env={"WORKSHOP_OUTPUT_DIR": str(out), "WORKSHOP_TINY": "1", "WORKSHOP_ENV": sys.prefix})
        launch.wait(job, "multi_node", output_dir=out, poll_s=1, start_within_s=120)
    else:
        launch.run_local("stage2", 2, out, *args, env={"CUDA_VISIBLE_DEVICES": ""})
    yield load_results([tiny_runs / "stage2", out])
    shutil.rmtree(out, ignore_errors=True)


def test_answers_agree_with_a_two_rank_cpu_run(two_ranks):
    text, m = _check(two_ranks, load_results(REF))
    ranks = two_ranks.loc[two_ranks.world_size == 2, "per_rank_memory"].iloc[0]
    hosts = {r["host"] for r in ranks}
    assert m["nodes (distinct hosts)"] == len(hosts) and m["ranks"] == 2
    assert m["peak memory per rank MiB"] == max(r["host_peak_rss_mib"] for r in ranks)
    if launch.slurm_available():
        assert m["source"] == "a several-node job" and hosts == {"n1", "n2"}
