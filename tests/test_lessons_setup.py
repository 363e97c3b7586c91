"""Notebook 00's figures (`lessons.setup`) against the parameter counts and the estimates table the notebook
builds, and exercise 3's verdict on a table whose stage-2 row disagrees."""

import re

import pandas as pd
import pytest

from conftest import HANG_S
from workshop_lessons import setup
from workshop_lib import memory, model


def _estimates() -> pd.DataFrame:
    rows = []
    for name in (model.DEFAULT_MODEL, model.CLASSIC_MODEL):
        n = model.count_params(name)
        for stage in (0, 2, 3):
            for gpus in (1, 4):
                est = memory.estimate_model_states(
                    n["num_params"], n["largest_layer_params"], stage, num_gpus_per_node=gpus
                )
                rows.append(
                    {
                        "model": name,
                        "zero_stage": stage,
                        "offload": "-",
                        "GPUs": gpus,
                        "GPU MiB per GPU": est["estimated_model_states_gpu_mib"],
                    }
                )
    return pd.DataFrame(rows)


def test_setup_figures_follow_the_estimates_and_the_parameter_counts():
    qwen, bloom = model.count_params(model.DEFAULT_MODEL), model.count_params(model.CLASSIC_MODEL)
    q, b = setup.param_counts(model.DEFAULT_MODEL), setup.param_counts(model.CLASSIC_MODEL, bloom)
    assert (q.num_params, q.largest_layer_params) == (qwen["num_params"], qwen["largest_layer_params"])
    # the largest tensor is the token embedding: vocabulary x hidden size
    assert b.largest_is_embedding and q.largest_is_embedding
    assert b.largest_share == bloom["largest_layer_params"] / bloom["num_params"] and b.largest_share > q.largest_share
    t = setup.params_table([model.DEFAULT_MODEL, model.CLASSIC_MODEL]).set_index("model")
    assert t.at[model.CLASSIC_MODEL, "parameters"] == bloom["num_params"]
    assert t.at[model.CLASSIC_MODEL, "largest tensor (% of parameters)"] == round(100 * b.largest_share, 1)

    est = _estimates()
    mib = est[est.model == model.DEFAULT_MODEL].set_index(["zero_stage", "GPUs"])["GPU MiB per GPU"]
    z = setup.zero_split(est, model.DEFAULT_MODEL)
    assert (z.stage0_1gpu_mib, z.stage2_1gpu_mib, z.stage3_4gpu_mib) == (mib[0, 1], mib[2, 1], mib[3, 4])
    assert z.stage3_fraction == mib[3, 4] / mib[0, 1] and 0 < z.stage3_fraction < 1
    c = z.stage2_vs_stage0
    assert (c.unit, c.band, c.verdict) == ("MiB", None, "equal")  # one GPU: nothing to divide by
    # a table where stage 2 on one GPU disagrees (its 4-GPU figure put in its place): the verdict says so
    est.loc[(est.model == model.DEFAULT_MODEL) & (est.zero_stage == 2) & (est.GPUs == 1), "GPU MiB per GPU"] = mib[2, 4]
    c = setup.zero_split(est, model.DEFAULT_MODEL).stage2_vs_stage0
    assert c.verdict == "lower" and c.difference == mib[2, 4] - mib[0, 1]


def test_a_warm_up_shows_op_builds_at_once_and_holds_the_rest():
    """A warm-up's output is held back (printed only if it fails), but an op build or a wait for another
    process's build reaches the cell as it happens: minutes of silence read as a hang."""
    import contextlib
    import io

    from workshop_lessons.warmup import _Held

    shown = io.StringIO()
    held = _Held(shown)
    with contextlib.redirect_stdout(held):
        print("step 1 of 4")
        print("Compiling DeepSpeed's cpu_adam op (once per machine and torch)", "...")
        print("Waiting for /root/.cache/torch_extensions/py311_cpu/cpu_adam/lock: another process is building it")
        print("  compiled in 95 s, cached in /root/.cache/torch_extensions/py311_cpu/cpu_adam for later runs.")
    assert shown.getvalue().splitlines() == [
        "Compiling DeepSpeed's cpu_adam op (once per machine and torch) ...",
        "Waiting for /root/.cache/torch_extensions/py311_cpu/cpu_adam/lock: another process is building it",
        "  compiled in 95 s, cached in /root/.cache/torch_extensions/py311_cpu/cpu_adam for later runs.",
    ]
    assert held.getvalue().startswith("step 1 of 4\nCompiling")


@pytest.mark.slow
def test_a_warm_up_in_a_kernel_shows_one_line_and_no_progress_table(tmp_path):
    """Issue 61, item 5: in a kernel the Trainer's progress table (and a datasets' bar) is a display, not text, and
    the warm-up's redirect of stdout did not hold it back: 01 and 02 showed each warm-up run's table. Executed in a
    real kernel (nbclient), a warm-up cell's only output is its one line."""
    import nbclient
    import nbformat

    cell = (
        "import workshop_lessons as lessons\n"
        f"lessons.warm_up('01_baseline', {str(tmp_path / 'runs')!r}, steps=1, experiments=['baseline'], tiny=True)"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    nbclient.NotebookClient(nb, timeout=HANG_S, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert [o["output_type"] for o in outputs] == ["stream", "execute_result"], outputs
    assert re.fullmatch(r"warm-up: \d+ s, not measured\n", outputs[0]["text"]), outputs[0]["text"]
    assert not (tmp_path / "runs" / "warm-up").exists()
