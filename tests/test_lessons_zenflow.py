"""The ZenFlow appendix's figures and verdicts (`workshop_lessons.zenflow`, notebook 03e) against the runs they were
computed from: made-up run directories whose figures are known, and the H100 reference runs
(workshop_lessons/reference/h100/course); and the DeepSpeed source line the appendix cites."""

import importlib
import inspect
import json

import deepspeed
import pandas as pd
import pytest

import workshop_lessons as lessons
from workshop_lessons import REFERENCE_DIR, zenflow
from workshop_lib.errors import WorkshopError


def _run(d, step_times, losses, gpu_peak=None):
    """A run directory as `workshop run` writes it, for 12 steps of 1,000 tokens each: results.json (the fields
    `zenflow.zenflow` reads), train_log.csv with an evaluation row after steps 4, 8 and 12, ds_config.json."""
    d.mkdir()
    (d / "results.json").write_text(
        json.dumps(
            {
                "warmup_steps": 4,
                "gpu_peak_allocated_mib": gpu_peak,
                "gpu_peak_mib": gpu_peak,
                "host_peak_rss_mib": 1000.0,
            }
        )
    )
    rows = []
    for step, (t, loss) in enumerate(zip(step_times, losses), start=1):
        rows.append({"step": step, "loss": loss, "eval_loss": None, "step_time_s": t, "tokens": 1000})
        if step % 4 == 0:
            rows.append({"step": step, "loss": None, "eval_loss": 9.0, "step_time_s": None, "tokens": None})
    pd.DataFrame(rows).to_csv(d / "train_log.csv", index=False)
    zf = {"topk_ratio": 0.1, "update_interval": 4, "overlap_step": False}
    (d / "ds_config.json").write_text(json.dumps({"zero_optimization": {"zenflow": zf}}))
    return d


def test_zenflow_speed_is_the_whole_windows_and_the_loss_the_last_cycles(tmp_path):
    """Steps 5-12 (after results.json's 4 warm-up steps): plain offload 1 s each; ZenFlow 0.5 s three steps in
    four and 2.5 s at each CPU update. All their tokens over their summed times: 8,000 / 8 s for both, 1.00x,
    where the median step (0.5 s) would make ZenFlow twice as fast. Losses over the last third in whole
    cycles of 4 steps (9-12): 10 - 0.1 x 10.5 = 8.95 for offload, 10 - 0.05 x 10.5 = 9.475 for ZenFlow."""
    steps = range(1, 13)
    off = _run(tmp_path / "off", [1.0] * 12, [10 - 0.1 * s for s in steps])
    zf = _run(tmp_path / "zf", [2.5 if s % 4 == 0 else 0.5 for s in steps], [10 - 0.05 * s for s in steps])
    z = zenflow.zenflow(off, zf)
    assert z.window == (5, 12) and z.last == 4 and z.update_interval == 4 and not z.overlap_step
    assert z.speed.value == pytest.approx(1000) and z.speed.other == pytest.approx(1000)
    assert z.speed.ratio == pytest.approx(1.0) and z.speed.verdict == "within the band"
    assert z.loss.other == pytest.approx(8.95) and z.loss.value == pytest.approx(9.475)
    assert z.loss.difference == pytest.approx(0.525) and z.loss.verdict == "higher"
    assert "+0.525 nats (higher" in z.loss.difference_text
    assert z.gpu_peak is None and z.host_peak.ratio == 1.0  # no GPU in these runs
    # step 1's losses, before any update: 0.05 nats apart, not the same model; a run against itself is
    assert (z.start.zenflow, z.start.offload) == pytest.approx((9.95, 9.9)) and not z.start.same_start
    assert z.start.deepspeed is None  # these results.json record no versions
    assert zenflow.zenflow(off, off).start.same_start


def test_zenflow_refuses_runs_of_different_steps(tmp_path):
    off = _run(tmp_path / "off", [1.0] * 12, [9.0] * 12)
    zf = _run(tmp_path / "zf", [1.0] * 8, [9.0] * 8)
    with pytest.raises(WorkshopError, match="ran different steps") as e:
        zenflow.zenflow(off, zf)
    assert "To fix:" in str(e.value)


def test_the_reference_runs_started_from_different_models():
    """The H100 reference (DeepSpeed 0.19.8): step 1's loss, before any update, 12.2315 nats for ZenFlow against
    12.2057 for plain offload on the same batch: DeepSpeed's engine start scrambled ZenFlow's weights. Both runs
    are the appendix's (`COURSE_RUNS`), so `lessons.table` sets the learner's beside them."""
    runs = REFERENCE_DIR / "runs"
    ref = zenflow.first_loss_check(runs / "stage2_offload", runs / "stage2_zenflow")
    assert ref.deepspeed == "0.19.8" and not ref.same_start
    assert (ref.zenflow, ref.offload) == pytest.approx((12.2315, 12.2057), abs=1e-4)
    assert list(lessons.reference("03e_zenflow").index) == ["stage2_offload", "stage2_zenflow"]
    assert "stage2_zenflow" not in lessons.COURSE_RUNS["03_cpu_offload"]


@pytest.mark.skipif(deepspeed.__version__ != "0.19.8", reason="the appendix cites DeepSpeed 0.19.8's line")
def test_the_cited_line_is_deepspeed_0_19_8s():
    """Notebook 03e: `_update_model_bit16_weights`, line 894 of deepspeed/runtime/zero/stage_1_and_2.py in 0.19.8,
    views the flat buffer with `.view(meta.shape)`, not through ZenFlow's transposing `unflatten`."""
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    source, first = inspect.getsourcelines(DeepSpeedZeroOptimizer._update_model_bit16_weights)
    line = source[894 - first]
    assert inspect.getsourcefile(DeepSpeedZeroOptimizer).endswith("deepspeed/runtime/zero/stage_1_and_2.py")
    assert "flat_group.narrow(0, offset, meta.numel()).view(meta.shape)" in line
    assert "unflatten" not in "".join(source)


def test_the_first_loss_check_finds_the_defect_in_tiny_runs_on_this_machine(tiny_runs):
    """The appendix's check on real tiny runs (`workshop run --tiny`, the same settings and steps): with a DeepSpeed
    whose `_update_model_bit16_weights` scrambles ZenFlow's weights (0.19.7, 0.19.8), step 1's losses differ."""
    if deepspeed.__version__ not in ("0.19.7", "0.19.8"):
        pytest.skip(f"DeepSpeed {deepspeed.__version__}: whether it scrambles is what the check finds out")
    z = zenflow.zenflow(tiny_runs / "stage2_offload", tiny_runs / "stage2_zenflow")
    assert not z.start.same_start and z.start.deepspeed == deepspeed.__version__


def test_deepspeeds_state_clear_lines_leave_the_output_and_nothing_else(capsys):
    """`without_state_clears` drops the line DeepSpeed's ZenFlow optimizer prints (its source still prints it) and
    passes every other line, before and after, unchanged; stdout is restored after."""
    source = inspect.getsource(importlib.import_module("deepspeed.ops.adam.zenflow_torch_adam"))
    assert f'print("{zenflow.STATE_CLEARS}")' in source
    with zenflow.without_state_clears():
        print("step 1")
        print(zenflow.STATE_CLEARS)
        print("step 2", zenflow.STATE_CLEARS[:7], end="!\n")
        print(zenflow.STATE_CLEARS)
    print("after")
    assert capsys.readouterr().out == f"step 1\nstep 2 {zenflow.STATE_CLEARS[:7]}!\nafter\n"
