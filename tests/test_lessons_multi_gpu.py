"""Notebook 04's figures and verdicts (`workshop_lessons.multi_gpu`) against the runs they were computed
from: the 4 x H200 runs (workshop_lessons/reference/h200/default-x4, steady state: 1, 2 and 4 GPUs) standing in as the learner's runs, and real
two-rank runs of the tiny model on this machine (a two-node SLURM job where a cluster answers, as the notebook
makes it; else two local processes) with DeepSpeed's comms logger on: notebook 04's own, as CI executes it, in
tests/test_executed_notebooks.py. Every figure is recomputed here from the
runs; a wrong figure or a verdict that does not follow from its figures fails here."""

import json
import math
import shutil
import sys

import pandas as pd
import pytest

from conftest import HANG_S
from workshop_lessons import REFERENCE, band, multi_gpu
from workshop_lib import launch, memory
from workshop_lib.config import parse_run_args, resolve
from workshop_lib.errors import WorkshopError
from workshop_lib.results import load_results, scaling_table

P, LARGEST = 596_049_920, 155_582_464  # Qwen3-0.6B
MiB = 2**20
REF = REFERENCE / "h200" / "default-x4" / "runs"


def _arith():
    f = {0: lambda n: 16 * P, 1: lambda n: 4 * P + 12 * P / n, 2: lambda n: 2 * P + 14 * P / n, 3: lambda n: 16 * P / n}
    return pd.DataFrame(
        [
            {
                "GPUs": n,
                "zero_stage": s,
                "16Ψ arithmetic MiB": round(g(n) / MiB),
                "DeepSpeed estimate MiB": memory.estimate_model_states(P, LARGEST, s, num_gpus_per_node=n)[
                    "estimated_model_states_gpu_mib"
                ],
            }
            for n in (1, 2, 4, 8)
            for s, g in f.items()
        ]
    )


def _verdict(value, other, tolerance):
    """The verdict recomputed: within the tolerance of the spread |a - b| / mean, else higher or lower."""
    if tolerance is not None and abs(value - other) / ((abs(value) + abs(other)) / 2) <= tolerance:
        return "within the band"
    return "higher" if value > other else "lower" if value < other else "equal"


def _check(df, ref):
    """The figures and verdicts that hold for any runs `df`, every one recomputed from df here."""
    scaling = scaling_table(df)
    a = multi_gpu.figures(_arith(), scaling, ref, df, P)
    s = a.states_16.set_index("zero_stage")
    assert s.at[2, "MiB per GPU on 16 GPUs"] == pytest.approx(P * (2 + 14 / 16) / MiB)
    assert s.at[3, "MiB per GPU on 16 GPUs"] == pytest.approx(P / MiB)
    assert s.at[2, "fraction of 1 GPU"] == pytest.approx((2 + 14 / 16) / 16) and s.at[3, "fraction of 1 GPU"] == 1 / 16
    assert s.at[2, "MiB per GPU on 1 GPU"] == round(16 * P / MiB)
    assert s.at[2, "not partitioned MiB"] == pytest.approx(2 * P / MiB) and s.at[3, "not partitioned MiB"] == 0
    mem = next(c for c in scaling.columns if c.startswith("peak"))
    assert a.on_gpu == mem.startswith("peak GPU")
    assert {m.experiment for m in a.memory} == set(scaling.experiment)
    for m in a.memory:
        g = scaling[scaling.experiment == m.experiment]
        assert (m.ranks_from, m.ranks_to) == (g.iloc[0].GPUs, g.iloc[-1].GPUs)
        assert m.change_mib == pytest.approx(g.iloc[-1][mem] - g.iloc[0][mem])
        run = df[df["experiment"] == m.experiment].iloc[0]
        off = tuple(run.get(k) not in (None, "none", False) for k in ("offload_optimizer", "offload_param"))
        fall = (
            run["num_params"]
            * (
                memory.zero_bytes_per_param(int(run["zero_stage"]), m.ranks_from, *off)
                - memory.zero_bytes_per_param(int(run["zero_stage"]), m.ranks_to, *off)
            )
            / MiB
        )
        assert m.arithmetic_fall_mib == pytest.approx(fall) and (m.offload_optimizer, m.offload_param) == off
        assert m.fall.verdict == _verdict(-m.change_mib, fall, multi_gpu.MEMORY_TOLERANCE)
        assert m.fall.band == multi_gpu.MEMORY_TOLERANCE
    steady = df["steady_train_tokens_per_second"].notna().all()
    col = "steady_train_tokens_per_second" if steady else "train_samples_per_second"  # as scaling_table
    per_rank = {(r.experiment, r.world_size): r[col] / r.world_size for _, r in df.iterrows()}
    assert {(x.experiment, x.gpus) for x in a.scaling} == {k for k in per_rank if k[1] > df.world_size.min()}
    for x in a.scaling:
        eff = per_rank[(x.experiment, x.gpus)] / per_rank[(x.experiment, x.base_gpus)]
        assert x.per_rank.ratio == pytest.approx(eff) and x.base_gpus == df.world_size.min()
        table = scaling[(scaling.experiment == x.experiment) & (scaling.GPUs == x.gpus)]["scaling efficiency"].iloc[0]
        assert table == f"{eff:.0%}"  # the learner's table says the same
        # the spread of this experiment's runs at these ranks over notebook 04's reference's rounds
        names = tuple(f"{x.experiment}-{n}" for n in sorted(df[df.experiment == x.experiment].world_size))
        noise = band(col, multi_gpu.REFERENCE, names)
        noise = band(col) if noise is None else noise  # an experiment the reference has not: the course's band
        assert x.per_rank.band == noise and x.steady == steady
        assert x.per_rank.verdict == _verdict(x.per_rank.value, x.per_rank.other, noise)
    col = "steady_train_tokens_per_second" if steady else "train_tokens_per_second"  # multi_node_row's
    assert a.global_batch == scaling.groupby("GPUs")["global batch (questions)"].mean().to_dict()
    assert a.max_steps == df.global_steps.max() and a.model_params == df.num_params.iloc[0]
    m = a.multi_node
    row = df[df.run_dir == m["run"]].iloc[0]
    assert m["ranks"] == row.world_size and m["tokens/s"] == round(row[col])
    one = df[(df.experiment == row.experiment) & (df.world_size == 1)][col].iloc[0]
    assert a.multi_node_speed.ratio == pytest.approx(row[col] / row.world_size / one)
    assert m["tokens/s against 1 rank"] == f"{row[col] / one:.2f}x"
    return a


def test_answers_agree_with_the_h200_runs():
    ref = load_results(REF)
    a = _check(ref, ref)
    assert a.on_gpu and all(x.per_rank.ratio < 1 for x in a.scaling)  # every H200 efficiency is below 100%
    assert [x.per_rank for x in a.scaling] == [x.per_rank for x in a.reference_scaling]
    m = a.multi_node
    assert (m["nodes (distinct hosts)"], m["ranks"]) == (1, 4) and "on this one machine" in m["source"]
    tps = ref.set_index(["experiment", "world_size"])["steady_train_tokens_per_second"]
    assert m["tokens/s against 1 rank"] == f"{tps[('stage2', 4)] / tps[('stage2', 1)]:.2f}x"


def test_verdict_when_gpu_runs_scale_above_100_percent():
    """The H200 runs with the steady tokens/s of stage2 on 1 GPU and stage3_offload on 1 GPU swapped (a slow
    one-GPU run): stage2's efficiency is then far above 1, and its verdict "higher", beyond the band."""
    ref = load_results(REF)
    i = ref.index[(ref.experiment == "stage2") & (ref.world_size == 1)][0]
    j = ref.index[(ref.experiment == "stage3_offload") & (ref.world_size == 1)][0]
    col = "steady_train_tokens_per_second"
    ref.loc[[i, j], col] = ref.loc[[j, i], col].to_numpy()
    a = _check(ref, load_results(REF))
    assert {x.per_rank.verdict for x in a.scaling if x.experiment == "stage2"} == {"higher"}


def test_reference_info_and_beside_name_the_h200_runs():
    ref = load_results(REF)
    info = multi_gpu.reference_info(ref)
    assert info["runs"] == {e: sorted(g.world_size) for e, g in ref.groupby("experiment")}
    assert info["global_steps"] == ref.global_steps.iloc[0] and "H200" in info["device"]
    assert multi_gpu.reference_info(None) is None
    table = multi_gpu.beside(scaling_table(ref), ref)
    assert (table["steady tokens/s"] == table["steady tokens/s (ref)"]).all()


@pytest.mark.parametrize("n, b", [(2, 4), (4, 2), (8, 2)])
def test_comm_volume_follows_the_zero_paper(n, b):
    """Rajbhandari et al. 2020, section 7: 2Ψ for data parallelism, ZeRO-1 and ZeRO-2, 3Ψ (1.5x) for ZeRO-3; a
    ring sends (N-1)/N of it per rank; DeepSpeed 0.19.8's stages 1-2 all-reduce gradients (3Ψ)."""
    v = multi_gpu.comm_volume(P, n, b).set_index("zero_stage")
    assert list(v["volume (Ψ)"]) == [2, 2, 2, 3]
    assert v.at[3, "MiB per step"] / v.at[2, "MiB per step"] == 1.5
    assert v.at[2, "MiB per step"] == pytest.approx(2 * P * b / MiB)
    assert (v["ring factor (N-1)/N"] == (n - 1) / n).all()
    assert v["MiB each rank sends per step"].tolist() == pytest.approx((v["MiB per step"] * (n - 1) / n).tolist())
    ds = multi_gpu.comm_volume(P, n, b, collectives=multi_gpu.DEEPSPEED).set_index("zero_stage")
    assert list(ds["volume (Ψ)"]) == [2, 3, 3, 3]
    # with 4 micro-batches a step: ZeRO-2 reduces gradients in each, ZeRO-3 gathers and reduces in each
    assert list(multi_gpu.comm_volume(P, n, b, 4)["volume (Ψ)"]) == [2, 2, 4 + 1, 12]
    assert list(multi_gpu.comm_volume(P, n, b, 4, multi_gpu.DEEPSPEED)["volume (Ψ)"]) == [2, 3, 2 * 4 + 1, 12]


def test_buckets_of_the_h200_recipe():
    cfg = json.loads((REF / "stage2-2gpu" / "ds_config.json").read_text())
    size = cfg["zero_optimization"]["reduce_bucket_size"]
    b = multi_gpu.buckets(cfg, P)
    assert (b.count, b.bytes_per_element) == (math.ceil(P / size), 2)
    assert b.bucket_mib == pytest.approx(size * 2 / MiB) and b.last_mib == pytest.approx((P - size) * 2 / MiB)
    assert b.reduced_during_backward == pytest.approx(size / P) == b.first_sent_at
    small = multi_gpu.Buckets(P, 50_000_000, 2)
    assert small.count == 12 and small.reduced_during_backward == pytest.approx(11 * 5e7 / P)
    assert small.first_sent_at == pytest.approx(5e7 / P)
    one = multi_gpu.Buckets(1000, 5000, 4)  # a bucket larger than the model: one, sent at the end
    assert (one.count, one.reduced_during_backward, one.first_sent_at, one.last_mib) == (1, 0, 1, 4000 / MiB)


def test_comms_logger_option():
    assert parse_run_args(["stage2", "--comms-logger"]).comms_logger is True
    assert parse_run_args(["stage2"]).comms_logger is False
    with pytest.raises(WorkshopError, match="baseline shards nothing"):
        resolve(parse_run_args(["baseline", "--tiny", "--comms-logger"]))


def _comms(df):
    run = df[df.world_size == 2].iloc[0]
    comms = multi_gpu.read_comms(run.run_dir)
    assert comms is not None, f"no comms.json in {run.run_dir}"
    assert (comms["world_size"], comms["backend"], comms["optimizer_steps"]) == (2, "gloo", run.global_steps)
    assert len(comms["per_rank"]) == 2 and comms["ops"] == comms["per_rank"][0]
    for theirs in comms["per_rank"][1:]:  # every rank hands the same messages to the same collectives
        assert {op: v["messages"] for op, v in theirs.items()} == {op: v["messages"] for op, v in comms["ops"].items()}
    return comms, run.to_dict()


@pytest.fixture(scope="module")
def comm_runs(tmp_path_factory):
    """A two-rank run on this machine with the comms logger: ZeRO-2 with 2 micro-batches a step (2 steps). The
    notebook's own two-rank runs (ZeRO-2 and ZeRO-3) are checked on its executed runs
    (tests/test_executed_notebooks.py)."""
    root = tmp_path_factory.mktemp("comms")
    launch.run_local(
        "stage2",
        2,
        root / "stage2_accum2",
        "--tiny",
        "--max-steps",
        "2",
        "--comms-logger",
        "--gradient-accumulation-steps",
        "2",
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    yield {d.name: load_results(d) for d in root.iterdir()}
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_zero2_reduces_gradients_in_every_micro_batch(comm_runs):
    """With 2 micro-batches a step, ZeRO-2 all-reduces every gradient twice a step (4Ψ) and gathers once (Ψ):
    DeepSpeed's 2 x 2 + 1 = 5Ψ, where the paper counts 2 + 1 = 3Ψ."""
    comms, run = _comms(comm_runs["stage2_accum2"])
    assert run["gradient_accumulation_steps"] == 2
    c = multi_gpu.comm_check(comms, run)
    assert c.gradients == pytest.approx(4, rel=multi_gpu.COMM_TOLERANCE)
    assert c.parameters == pytest.approx(1, rel=multi_gpu.COMM_TOLERANCE)
    assert c.deepspeed.verdict == "within the band"
    assert c.deepspeed.other == pytest.approx(5 * run["num_params"] * 4 / MiB)


def test_links_read_the_two_nodes_on_one_host_reference():
    """multi_gpu.links on the committed 2 x H100 folder notebook 04 reads (`LINKS`): NCCL's transport per link,
    ZeRO-2's collectives as DeepSpeed issues them: the gradients' all-reduce at the largest all-reduce's bandwidth,
    the parameters' all-gather, and their sum; three raw NCCL lines from its sockets log."""
    t = multi_gpu.links(multi_gpu.LINKS).set_index("link")
    assert list(t.index) == ["nvlink", "sockets"]
    assert t.at["nvlink", "NCCL transport"].startswith("P2P") and t.at["sockets", "NCCL transport"].startswith(
        "NET/Socket"
    )
    comm = pd.read_csv(multi_gpu.LINKS / "comm-sockets.csv")
    ar = comm.query("op == 'all_reduce'").sort_values("mib").iloc[-1]
    gather = comm.query("what == 'parameters'").iloc[0]
    assert t.at["sockets", "all_reduce ms"] == pytest.approx(ar["ms"] / ar["mib"] * gather["mib"])
    assert t.at["sockets", "serial ms"] == pytest.approx(t.at["sockets", "all_reduce ms"] + gather["ms"])
    assert t.at["sockets", "all_gather bus GB/s"] < t.at["nvlink", "all_gather bus GB/s"] / 10
    lines, log = multi_gpu.nccl_lines(tmp := multi_gpu.LINKS / "missing.log", multi_gpu.LINKS / "nccl-sockets.txt")
    assert log.name == "nccl-sockets.txt" and not tmp.exists() and len(lines) == 3
    assert all(ln.startswith("[") and "NCCL INFO" in ln for ln in lines) and lines[2].endswith("via NET/Socket/0")
    assert t.at["sockets", "stage2 s/step"] > t.at["nvlink", "stage2 s/step"]
    assert t.at["sockets", "stage3 s/step"] > t.at["nvlink", "stage3 s/step"]


def test_a_killed_torchrun_leaves_its_worker_running(tmp_path):
    """Notebook 04's checklist, item 6: torchrun starts each worker in a session of its own (torch's elastic
    `SubprocessHandler`: start_new_session), so SIGKILL to torchrun's whole process group leaves the worker
    running, to be ended by its own pid."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    pid_file = tmp_path / "worker.pid"
    worker_py = tmp_path / "worker.py"
    worker_py.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "1",
            str(worker_py),
            str(pid_file),
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        worker = psutil.Process(int(pid_file.read_text()))
        assert worker.ppid() == agent.pid and os.getsid(worker.pid) != os.getsid(agent.pid)
        os.killpg(agent.pid, signal.SIGKILL)  # torchrun's process group, as `kill -9 -- -PGID` sends it
        agent.wait(timeout=HANG_S)
        time.sleep(1)
        assert worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
        if pid_file.exists() and pid_file.read_text() and psutil.pid_exists(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
