"""The course's Jupyter server extension (workshop_lessons/jupyter.py) under a real `jupyter server`, through its REST
API as JupyterLab calls it: a course notebook gets this Python's version, every other notebook (any language_info
shape the server alone opens) is served untouched, "Trust Notebook" still trusts; the server's start time and memory
with and without it are printed, and importing it imports nothing heavy."""

import json
import os
import platform
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from conftest import HANG_S

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _notebook(language_info, source="print(1)") -> str:
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    meta |= {"language_info": language_info}
    cell = {"id": "c1", "cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": meta, "cells": [cell]})


def _serve(root: Path, tmp_path: Path, extension: bool):
    """`jupyter server` over `root`, with or without the extension: (process, url, token, seconds to answer)."""
    from test_browser import _free_port

    env = os.environ | {f"JUPYTER_{d}_DIR": str(tmp_path / d.lower()) for d in ("CONFIG", "DATA", "RUNTIME")}
    port, token = _free_port(), "t"
    (tmp_path / "config").mkdir(parents=True, exist_ok=True)  # the user's config overrides the environment's
    off = {"ServerApp": {"jpserver_extensions": {"workshop_lessons.jupyter": extension}}}
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(off))
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--port={port}"]
        + [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() - t0 < 120 and proc.poll() is None:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            return proc, url, token, time.monotonic() - t0
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"jupyter server did not answer: {proc.communicate()[0][-2000:]}")


def _api(url, token, method, path, body=None):
    req = urllib.request.Request(
        f"{url}/api/contents/{path}?token={token}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=HANG_S) as r:
        return json.loads(r.read() or b"null")


def test_the_extension_touches_only_course_notebooks_keeps_trust_and_measures_its_cost(tmp_path):
    root = tmp_path / "course"
    root.mkdir()
    header = (ROOT / "course" / "00_setup.py").read_text()
    (root / "00_setup.py").write_text(re.sub(r"^(#     version: )\S+$", r"\g<1>3.0.0", header, count=1, flags=re.M))
    shapes = {"null": None, "string": "python", "list": ["python"], "other": {"name": "python", "version": "3.0.0"}}
    for name, info in shapes.items():
        (root / f"{name}.ipynb").write_text(_notebook(info))
    (root / "course.ipynb").write_text(_notebook(shapes["other"], "from workshop_lessons import setup"))
    proc, url, token, start_s = _serve(root, tmp_path, extension=True)
    try:
        rss_mib = psutil.Process(proc.pid).memory_info().rss / 2**20
        for name, info in shapes.items():  # opened as the server alone opens them, untouched
            assert _api(url, token, "GET", f"{name}.ipynb")["content"]["metadata"]["language_info"] == info
        model = _api(url, token, "GET", "00_setup.py")
        assert model["content"]["metadata"]["language_info"]["version"] == platform.python_version()
        assert _api(url, token, "GET", "course.ipynb")["content"]["metadata"]["language_info"]["version"] != "3.0.0"
        _api(url, token, "POST", "course.ipynb/trust")  # JupyterLab's "Trust Notebook"
        cells = _api(url, token, "GET", "course.ipynb")["content"]["cells"]
        assert all(c["metadata"].get("trusted") for c in cells if c["cell_type"] == "code")
    finally:
        proc.terminate()
        proc.communicate(timeout=HANG_S)
    proc, *_, bare_s = _serve(root, tmp_path / "bare", extension=False)
    bare_mib = psutil.Process(proc.pid).memory_info().rss / 2**20
    proc.terminate()
    proc.communicate(timeout=HANG_S)
    print(
        f"jupyter server: {start_s:.1f} s, {rss_mib:.0f} MiB with the extension; {bare_s:.1f} s, {bare_mib:.0f} without"
    )


def test_importing_the_extension_imports_nothing_heavy():
    """The server imports the extension as it starts: torch, transformers and DeepSpeed would cost it ~30 s and
    ~480 MiB (workshop_lessons/__init__.py imports them only when a lesson needs them)."""
    code = (
        "import sys, workshop_lessons.jupyter; print(sorted({'torch', 'transformers', 'deepspeed'} & set(sys.modules)))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]", p.stdout
