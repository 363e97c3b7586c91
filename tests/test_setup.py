"""What the README's set-up promises: JupyterLab shows each notebook once and keeps its outputs, and the test tiers
are what their names say, and the plots name runs truly. Fast: no training. (That the set-up works without root is CI's
container check, `.ci/container.sh readme`.)"""

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_jupyterlab_lists_each_notebook_once_and_keeps_its_outputs(tmp_path):
    """Through jupytext's own contents manager (what JupyterLab uses with jupytext installed) and the project's
    [tool.jupytext] pairing: course/ lists the .py notebook alone; saving it with outputs leaves the .py as it
    was and puts the outputs in outputs/NAME.ipynb, where reopening the .py finds them."""
    jupytext = pytest.importorskip("jupytext")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "course").mkdir()
    shutil.copy(ROOT / "course" / "00_setup.py", tmp_path / "course")
    cm = jupytext.TextFileContentsManager(root_dir=str(tmp_path))
    model = cm.get("course/00_setup.py")
    assert model["type"] == "notebook"
    code = next(c for c in model["content"]["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "a learner's output\n"}]
    cm.save(model, "course/00_setup.py")
    assert (tmp_path / "course" / "00_setup.py").read_text() == (ROOT / "course" / "00_setup.py").read_text()
    assert sorted(c["name"] for c in cm.get("course")["content"]) == ["00_setup.py", "outputs"]
    assert [c["name"] for c in cm.get("course/outputs")["content"]] == ["00_setup.ipynb"]
    reopened = cm.get("course/00_setup.py")["content"]["cells"]
    assert any(
        o.get("text") == "a learner's output\n" for c in reopened if c["cell_type"] == "code" for o in c["outputs"]
    )


def test_jupytext_config_makes_python_files_open_as_notebooks(tmp_path):
    """The README's one-time command writes JupyterLab's default viewer for Python files."""
    pytest.importorskip("jupytext")
    settings = tmp_path / "plugin.jupyterlab-settings"
    subprocess.run(
        [
            shutil.which("jupytext-config") or "jupytext-config",
            "--settings-file",
            settings,
            "set-default-viewer",
            "python",
        ],
        check=True,
        capture_output=True,
    )
    viewers = json.loads(settings.read_text())["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["python"] == "Jupytext Notebook"


def test_plain_pytest_is_the_fast_tier():
    """pyproject's addopts deselect the slow tier; scripts/test.sh asks for every tier with -m ""."""
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert opts == ["-m", "not slow", "-rs"]
    assert 'pytest -q -m ""' in (ROOT / "scripts" / "test.sh").read_text()


def test_plots_label_runs_by_experiment_and_say_when_the_model_is_tiny():
    import pandas as pd

    from workshop_lib.results import _labels, _tiny_note

    df = pd.DataFrame(
        {
            "experiment": ["stage2", "stage2", "baseline"],
            "model": ["Qwen/Qwen3-0.6B (tiny)"] * 3,
            "recipe": ["default", "classic", "default"],
            "tiny": [True] * 3,
            "run_dir": ["runs/stage2-tiny-20261123-1", "runs/x", "runs/y"],
        }
    )
    assert _labels(df) == ["stage2 default", "stage2 classic", "baseline default"]
    assert _labels(df.assign(recipe="default")) == ["stage2-tiny-20261123-1", "stage2 (x)", "baseline (y)"]
    ac = pd.DataFrame({"experiment": ["baseline"] * 2, "run_dir": ["runs/baseline", "runs/baseline_ac"]})
    assert _labels(ac) == ["baseline", "baseline_ac"]  # not "baseline (baseline_ac)"
    assert "tiny model" in _tiny_note(df) and _tiny_note(df.assign(tiny=False)) == ""
    # a token-budget run's micro-batch is its token budget, not the sequence count the Trainer was given
    mb = pd.DataFrame(
        {
            "experiment": ["baseline"] * 2,
            "micro_batch_size_per_gpu": [4, 16],
            "config": [{"batching": "token_budget", "max_tokens_per_micro_batch": 32768}, {}],
        }
    )
    assert _labels(mb) == ["baseline mb32768 tokens", "baseline mb16"]


def test_the_installed_deepspeed_is_at_the_floor():
    """What `workshop run` checks (preflight.check_machine), on this machine's DeepSpeed."""
    import importlib.metadata as md

    from workshop_lib.env import check_deepspeed_version

    try:
        version = md.version("deepspeed")
    except md.PackageNotFoundError:
        pytest.skip("DeepSpeed is not installed")
    check_deepspeed_version(version)


def test_the_deepspeed_floor_is_above_every_known_defect():
    """pyproject.toml's `deepspeed>=X` is env.DEEPSPEED_FLOOR, the release `workshop run` checks for."""
    from packaging.requirements import Requirement

    from workshop_lib.env import DEEPSPEED_FLOOR

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [Requirement(d).specifier for d in deps if Requirement(d).name == "deepspeed"]
    (floor,) = [s.version for s in spec if s.operator == ">="]
    assert floor == DEEPSPEED_FLOOR
