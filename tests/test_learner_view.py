"""What a learner's notebook shows: no library noise that reads as a failure (the linker's output from DeepSpeed's
async_io probe, DeepSpeed's accelerator warning, transformers' shard bar, ds_report's colour codes) while real
errors still show, and no loss set beside a reference run that started from other weights. Fast: no training."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import workshop_lessons as lessons
from conftest import HANG_S
from workshop_lib import env, results

ROOT = Path(__file__).resolve().parent.parent


def test_a_failed_link_probe_says_nothing_and_real_errors_still_show(capfd, monkeypatch):
    """DeepSpeed's own probe (`OpBuilder.has_function`, which links a test program against the library) for a
    library that is not there, with sys.stderr on another descriptor than 2, as under Jupyter: the linker's
    lines are held back, a line of another program in the same moment is written back."""
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("AsyncIOBuilder")
    monkeypatch.setattr(sys, "stderr", open(os.dup(2), "w"))  # ipykernel's stderr: a copy of descriptor 2
    with env.quiet_stderr():
        assert builder.has_function("io_submit", ("workshop_no_such_library",)) is False
        subprocess.run(["sh", "-c", "echo 'a real error' >&2"], check=True)
    sys.stderr.flush()
    err = capfd.readouterr().err
    assert "a real error" in err
    assert "cannot find -lworkshop_no_such_library" not in err and "collect2" not in err


def test_a_probe_finds_a_library_that_is_there_under_a_stderr_without_a_descriptor(monkeypatch):
    """ipykernel's stderr without its descriptors captured (nbmake) raises on fileno(): DeepSpeed's probe then
    failed whatever the library, so async_io read "not compatible" in a notebook with libaio installed.
    libpthread is on every Linux."""
    import io

    from deepspeed.accelerator import get_accelerator

    class NoDescriptor(io.StringIO):
        def fileno(self):
            raise io.UnsupportedOperation("fileno")

    builder = get_accelerator().create_op_builder("AsyncIOBuilder")
    monkeypatch.setattr(sys, "stderr", NoDescriptor())
    assert builder.has_function("pthread_create", ("pthread",)) is False  # DeepSpeed alone: the probe breaks
    with env.quiet_stderr():
        assert builder.has_function("pthread_create", ("pthread",)) is True
    assert isinstance(sys.stderr, NoDescriptor)  # given back


def test_the_probe_noise_pattern_is_the_linkers_and_nothing_else():
    noise = [
        "/usr/bin/ld: cannot find -laio: No such file or directory",
        "collect2: error: ld returned 1 exit status",
        "ld.lld: cannot find -laio",
    ]
    assert all(env.LINK_PROBE_NOISE.search(line) for line in noise)
    assert not any(
        env.LINK_PROBE_NOISE.search(line)
        for line in ["RuntimeError: Error building extension 'cpu_adam'", "error: command 'g++' failed", "ld returned"]
    )


def test_deepspeed_picks_the_cpu_without_a_warning_where_there_is_no_gpu():
    code = "import workshop_lib.env; from deepspeed.accelerator import get_accelerator; print(get_accelerator()._name)"
    clean = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean, cwd=ROOT, check=True)
    import torch

    assert p.stdout.strip() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert "Setting accelerator to CPU" not in p.stderr


def test_ds_report_comes_without_colour_codes():
    lines = env.ds_report()
    assert any("cpu_adam" in line for line in lines) and any("[OKAY]" in line for line in lines)
    assert not any("\x1b[" in line for line in lines)


def test_saving_a_model_shows_no_shard_bar(tmp_path, capfd):
    from transformers import AutoModelForCausalLM

    from workshop_lib import model

    env.quiet_libraries()
    net = AutoModelForCausalLM.from_config(model.tiny_config(model.DEFAULT_MODEL, model.TINY_VOCAB))
    net.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    assert "Writing model shards" not in capfd.readouterr().err


def test_a_loss_is_never_set_beside_a_reference_that_started_from_other_weights():
    ref = lessons.reference("01_baseline")
    mine = ref.loc[["baseline"]].reset_index()
    mine["run_dir"] = "runs/01_baseline/baseline"
    cols = ["train_loss", "eval_loss", "steady_train_tokens_per_second"]
    bands = {"train_loss": 0.00001, "steady_train_tokens_per_second": 0.1}
    same = results.exercise_table(mine, cols, ref, bands).set_index("measured")
    assert same.at["reference", "weights"] == same.at["yours", "weights"] == "random"
    assert same.at["reference", "train loss"].endswith("± 0%")  # the same model and weights: within a band
    pretrained = mine.assign(random_weights=False, train_loss=1.5)
    t = results.exercise_table(pretrained, cols, ref, bands).set_index("measured")
    assert (t.at["yours", "weights"], t.at["reference", "weights"]) == ("pretrained", "random")
    for col in ("train loss", "eval loss per epoch"):
        assert "not comparable" in t.at["reference", col] and "±" not in t.at["reference", col]
    assert t.at["reference", "steady tokens/s"].endswith("± 10%")  # speed does not depend on the weights' values
    tiny = mine.assign(model="Qwen/Qwen3-0.6B (tiny)", tiny=True)
    assert results.not_comparable(tiny.iloc[0], ref.loc["baseline"]).startswith("another model")
    assert results.not_comparable(mine.iloc[0], ref.loc["baseline"]) is None
    assert isinstance(results.exercise_table(mine, cols, ref, bands), pd.DataFrame)


def test_the_cpu_runs_the_notebooks_with_the_settings_a_gpu_learner_gets(monkeypatch):
    """Only the model differs (the tiny one without a GPU): the run length is the reference runs' on both, so
    CI's notebook runs take the GPU learner's path (03b's killed run once lacked its --max-steps there)."""
    import torch

    for v in ("WORKSHOP_MAX_STEPS", "WORKSHOP_TINY", "WORKSHOP_RANDOM_WEIGHTS"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = lessons.notebook_run_options()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu = lessons.notebook_run_options()
    assert (cpu.pop("tiny"), gpu.pop("tiny")) == (True, False)
    assert cpu == gpu and cpu["max_steps"] == lessons.GPU_MAX_STEPS
    monkeypatch.setenv("WORKSHOP_MAX_STEPS", "0")
    assert lessons.notebook_run_options()["max_steps"] is None


def test_cpu_memory_figures_say_they_cannot_show_the_lesson():
    ref = lessons.reference("02_zero_stages")
    assert results.cpu_memory_note(ref) == ""  # GPU runs: nothing to say
    cpu = ref.assign(gpu_peak_mib=None, host_peak_rss_mib=700.0, estimated_model_states_cpu_mib=5.6)
    assert "Not meaningful on a CPU" in results.cpu_memory_note(cpu) and "0.8%" in results.cpu_memory_note(cpu)


def test_a_resume_shows_the_trainers_warning_only_for_a_setting_it_may_not_change():
    import logging

    from workshop_lib import checkpoint

    checkpoint.quiet_resume_notes()
    log = logging.getLogger("transformers.trainer_utils")
    head = "Warning: The following arguments do not match the ones in the `trainer_state.json` within the checkpoint directory: "

    def shown(message):
        return all(f(log.makeRecord(log.name, logging.WARNING, __file__, 0, message, None, None)) for f in log.filters)

    assert not shown(head + "\n\tsave_steps: 12 (from args) != 1 (from trainer_state.json)")
    assert not shown("mtime may not be reliable on this filesystem, falling back to numerical ordering")
    assert shown(
        head + "\n\tsave_steps: 12 (from args) != 1 (from trainer_state.json)"
        "\n\tper_device_train_batch_size: 8 (from args) != 4 (from trainer_state.json)"
    )
    assert shown("Any other warning")


def test_the_table_workshop_report_prints_fits_a_100_column_terminal(tmp_path, capsys):
    """`bash scripts/main.sh` ends with `workshop report` of its one run: the table it prints has one column per
    run and only the figures the machine has, each line within 100 columns (report.md keeps every column); here
    for a GPU reference run, whose table holds the most figures, and for it beside a copy."""
    import shutil

    from workshop_lib import cli

    ref = next((ROOT / "workshop_lessons" / "reference" / "h100" / "runs").iterdir())
    shutil.copytree(ref, tmp_path / "run", ignore=shutil.ignore_patterns("model", "checkpoints"))
    for runs in ([tmp_path / "run"], [tmp_path / "run", ref]):
        assert cli.main(["report", *map(str, runs), "--out", str(tmp_path / "report")]) == 0
        table = capsys.readouterr().out.split("\n(every column")[0].splitlines()
        assert len(table) > 10 and max(map(len, table)) <= 100, "\n".join(table)


NOTEBOOKS = sorted(p.stem for p in (ROOT / "solutions").glob("[0-9]*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("names", [NOTEBOOKS[:1], NOTEBOOKS[1:]], ids=["00", "the others"])
def test_a_notebook_copied_out_of_the_course_reads_what_it_needs_of_the_course(names, tmp_path):
    """Issue 61, item 10: 02 read `Path("../slurm/common.sh")`, a FileNotFoundError from a copy in another folder.
    A copy of each notebook in an empty folder, run in a real kernel there: 00 whole (it trains nothing); the others
    one after the other in one kernel, each its first code cell and every cell that reads a file other than a run's
    (what it needs of the course comes through `workshop_lessons`)."""
    import jupytext
    import nbclient

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    reads = re.compile(r"read_text\(|open\(|read_csv\(|\.\./")
    runs = re.compile(r"RUNS|reference|\bd /|killed")  # the notebook's own runs, made by cells not run here
    cells = []
    for name in names:
        nb = jupytext.read(ROOT / "solutions" / f"{name}.py")
        jupytext.write(nb, folder / f"{name}.ipynb")
        code = [c for c in nb.cells if c.cell_type == "code"]
        cells += (
            code
            if name == "00_setup"
            else [code[0], *[c for c in code[1:] if reads.search(c.source) and not runs.search(c.source)]]
        )
    nb.cells = cells
    nbclient.NotebookClient(nb, timeout=HANG_S, resources={"metadata": {"path": str(folder)}}).execute()
    errors = [o for c in nb.cells for o in c.outputs if o["output_type"] == "error"]
    assert not errors, errors
