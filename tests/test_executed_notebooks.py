"""What a learner sees in every notebook executed on the CPU: no warning, no progress bar, no widget, no traceback and
no error in any output (streams, results and displays: their text, HTML included, and their kind) but the errors a cell
exists to show (tagged raises-exception: 03c's out-of-memory refusals). scripts/test.sh executes the notebooks (nbmake
--overwrite keeps the outputs), then runs this file on its own. The learner's cells are course/NAME.ipynb's where it was
executed (it runs otherwise than its solution: `make_course.py --diverging`), else solutions/NAME.ipynb's but the
answers (the same cells in the same state); a notebook executed neither way is skipped. Then the figures of 03e and
04 recomputed from the runs their execution made (the two-rank runs with the comms logger: 04's ZeRO-2 as a two-node
SLURM job where a cluster answers), which the suite would otherwise make again."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Python's warnings, loggers' WARNING lines, tqdm's bars (as text, or as a widget's fallback text), tracebacks
NOISE = re.compile(r"Warning\b|WARNING|\d+%\||Traceback \(most recent call last\)")


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "solutions").glob("[0-9]*.py")))
def test_an_executed_learner_notebook_shows_no_warning_bar_or_error(name):
    for folder in ("course", "solutions"):
        path = ROOT / folder / f"{name}.ipynb"
        cells = json.loads(path.read_text())["cells"] if path.is_file() else []
        outputs = [
            (i, o)
            for i, c in enumerate(cells)
            for o in c.get("outputs", [])
            if "solution" not in c.get("metadata", {}).get("tags", [])
            and not ("raises-exception" in c.get("metadata", {}).get("tags", []) and o["output_type"] == "error")
        ]
        if outputs:
            break
    else:
        pytest.skip(f"{name} was not executed here")
    for i, o in outputs:
        data = [v for k, v in o.get("data", {}).items() if k.startswith("text/")]  # text/plain, text/html, ...
        text = "\n".join(
            t if isinstance(t, str) else "".join(t) for t in [o.get("text", ""), *data, *o.get("traceback", [])]
        )
        noise = [line for line in text.splitlines() if NOISE.search(line)]
        # a widget's text/plain is read as the rest: a progress bar's ("0%|") is noise, 03c's explorer is not
        assert o["output_type"] != "error" and not noise, (i, o.get("ename"), noise)


def test_notebook_03e_decision_table_is_made_of_its_own_runs():
    """03e executed on this machine: the decision table it wrote (decision.csv) is `fsdp.decision` of the runs beside
    it; the collectives come from its own two-rank runs, and each reduce-scattered every gradient once a step
    (Ψ) and gathered every parameter at least once."""
    import pandas as pd

    from workshop_lessons import fsdp
    from workshop_lessons.multi_gpu import COMM_TOLERANCE

    runs = ROOT / "solutions" / "runs" / "03e_zero3_or_fsdp2"
    if not (runs / "decision.csv").is_file():
        pytest.skip("03e_zero3_or_fsdp2 was not executed here")
    written = pd.read_csv(runs / "decision.csv", dtype=str, keep_default_na=False)
    rows = fsdp.decision(runs)
    assert written.equals(fsdp.decision_table(rows).astype(str))
    assert rows[-1].source == "your runs"
    t = fsdp.collective_table(runs).set_index("collective")
    for name in ("ZeRO-3", "FSDP2"):
        assert abs(t.at["reduce_scatter_tensor", f"{name} volume (Ψ)"] - 1) <= COMM_TOLERANCE
        assert t.at["all_gather_into_tensor", f"{name} volume (Ψ)"] >= 1 - COMM_TOLERANCE


def _notebook_04_runs(*names: str):
    """Notebook 04's runs as this machine's execution of it made them (solutions/runs/04_multi_gpu; on a CPU: the
    tiny model, two-rank runs with DeepSpeed's comms logger, stage2's as a two-node job where SLURM answers)."""
    from workshop_lib.results import load_results

    runs = ROOT / "solutions" / "runs" / "04_multi_gpu"
    if not all((runs / n / "results.json").is_file() for n in names):
        pytest.skip("04_multi_gpu was not executed here")
    return load_results([runs / n for n in names])


def test_notebook_04_answers_agree_with_its_two_rank_cpu_run():
    """04's figures and verdicts recomputed from its one- and two-rank ZeRO-2 runs (`test_lessons_multi_gpu._check`),
    the ranks' hosts (two SLURM nodes where a cluster answers) and each rank's micro-batches by step."""
    from test_lessons_multi_gpu import REF, _check

    from workshop_lessons import multi_gpu
    from workshop_lib import launch
    from workshop_lib.results import load_results

    two_ranks = _notebook_04_runs("stage2-1", "stage2-2")
    a = _check(two_ranks, load_results(REF))
    assert not a.on_gpu
    run = two_ranks.loc[two_ranks.world_size == 2].iloc[0]
    hosts = {r["host"] for r in run.per_rank_memory}
    m = a.multi_node
    assert m["nodes (distinct hosts)"] == len(hosts) and m["ranks"] == 2
    assert m["peak memory per rank MiB"] == max(r["host_peak_rss_mib"] for r in run.per_rank_memory)
    if launch.slurm_available():
        assert m["source"] == "a several-node job" and hosts == {"n1", "n2"}
    # each rank's micro-batches: the ranks of one step got batches built side by side (groups of world_size)
    s = multi_gpu.stragglers(run.run_dir)
    assert list(s.steps.index) == list(range(1, int(run.global_steps) + 1))
    assert s.steps.filter(like="forward_ms_").shape[1] == 2
    assert s.mean_waited_ms >= 0 and s.length_gap < 200


def test_notebook_04_zero2_comms_match_the_parameter_count():
    """ZeRO-2 over gloo on the CPU, fp32 (4 bytes): per step one all-reduce of every gradient (the model's Ψ
    elements: 2Ψ moved) and one all-gather of the updated parameters (Ψ/2 per rank, Ψ gathered), plus the
    gradient norm's 4-byte all-reduce: DeepSpeed's 3Ψ within COMM_TOLERANCE, 1.5x the paper's 2Ψ."""
    from test_lessons_multi_gpu import _comms

    from workshop_lessons import multi_gpu

    comms, run = _comms(_notebook_04_runs("stage2-2"))
    psi_bytes = run["num_params"] * 4
    sizes = {op: {int(b): c for b, c in v["messages"].items()} for op, v in comms["ops"].items()}
    steps = comms["optimizer_steps"]
    grads = {b: c for b, c in sizes["all_reduce"].items() if b > 64}
    assert sum(grads.values()) == steps
    assert all(b == pytest.approx(psi_bytes, rel=multi_gpu.COMM_TOLERANCE) for b in grads)
    ((shard, calls),) = sizes["all_gather_into_tensor"].items()
    assert calls == steps and 2 * shard == pytest.approx(psi_bytes, rel=multi_gpu.COMM_TOLERANCE)
    c = multi_gpu.comm_check(comms, run)
    assert c.gradients == pytest.approx(2, rel=multi_gpu.COMM_TOLERANCE)
    assert c.parameters == pytest.approx(1, rel=multi_gpu.COMM_TOLERANCE)
    assert c.deepspeed.verdict == "within the band" and c.deepspeed.band == multi_gpu.COMM_TOLERANCE
    assert c.paper.verdict == "higher" and c.paper.ratio == pytest.approx(1.5, rel=multi_gpu.COMM_TOLERANCE)
    t = multi_gpu.comm_measured(comms, run["num_params"], 4).set_index("collective")
    assert t.at["total", "volume (Ψ)"] == pytest.approx(3, rel=multi_gpu.COMM_TOLERANCE)
    assert t.at["total", "calls per step"] == sum(v["count"] for v in comms["ops"].values()) / steps


def test_notebook_04_zero3_comms_match_the_parameter_count():
    """ZeRO-3: one reduce-scatter of every gradient a step (Ψ), and all-gathers of between Ψ (each parameter once)
    and 2Ψ (the paper's forward and backward): ZeRO-3 keeps a gathered parameter it will use again soon
    (stage3_max_reuse_distance) and small ones whole (stage3_param_persistence_threshold)."""
    from test_lessons_multi_gpu import _comms, _verdict

    from workshop_lessons import multi_gpu

    comms, run = _comms(_notebook_04_runs("stage3-2"))
    ((size, calls),) = comms["ops"]["reduce_scatter_tensor"]["messages"].items()
    assert calls == comms["optimizer_steps"]
    assert int(size) == pytest.approx(run["num_params"] * 4, rel=multi_gpu.COMM_TOLERANCE)
    c = multi_gpu.comm_check(comms, run)
    assert c.gradients == pytest.approx(1, rel=multi_gpu.COMM_TOLERANCE)
    assert 1 <= c.parameters <= 2
    assert c.paper.verdict == _verdict(c.paper.value, c.paper.other, multi_gpu.COMM_TOLERANCE)
    assert c.paper.ratio <= 1 + multi_gpu.COMM_TOLERANCE
