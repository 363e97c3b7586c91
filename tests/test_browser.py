"""JupyterLab as a learner meets it, in a real browser: `jupyter lab` serves a copy of course/ (with the
repository's jupytext settings), headless Chromium (Debian's package, driven by Playwright with no browser
download) opens a course notebook the way the README says, runs its first cells and reads the page. The
screenshot is kept in logs/ (CI's artefacts)."""

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import HANG_S

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTEBOOK, CELLS = "00_setup.py", 2  # its first code cells: imports and the header, then ds_report
SCREENSHOT = ROOT / "logs" / "browser-00_setup.png"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium here: the browser test needs Debian's chromium package "
        "(sudo apt-get install chromium; .ci/run installs it)",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """`jupyter lab` over a copy of course/ and pyproject.toml (the notebooks' pairing), with its own Jupyter
    config where `jupytext-config set-default-viewer python` ran, as the README has the learner do once."""
    shutil.copytree(ROOT / "course", tmp_path / "course", ignore=shutil.ignore_patterns("outputs", "runs"))
    # a learner whose Python is not the one the header names (make_course.py's)
    header = tmp_path / "course" / NOTEBOOK
    header.write_text(re.sub(r"^(#     version: )\S+$", r"\g<1>3.0.0", header.read_text(), count=1, flags=re.M))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    env = os.environ | {
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    subprocess.run(["jupytext-config", "set-default-viewer", "python"], env=env, check=True, capture_output=True)
    port, token = _free_port(), "workshop-browser-test"
    proc = subprocess.Popen(
        [
            "jupyter",
            "lab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp_path / 'course'}",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(2 * HANG_S):  # polled each half second while the server lives: load only makes it longer
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail(f"jupyter lab did not answer within {HANG_S} s")
    if proc.poll() is not None:
        pytest.fail(f"jupyter lab exited: {proc.communicate()[0][-2000:]}")
    yield url, token
    proc.terminate()
    proc.communicate(timeout=HANG_S)


def test_a_course_notebook_opens_and_runs_in_jupyterlab_without_a_dialog_or_a_warning(lab):
    """A double click's URL opens the .py as a notebook (not as text), with its kernel started, no "Select
    Kernel" dialog and not marked modified, though its header names another Python than the kernel's (the course's
    server extension, workshop_lessons/jupyter.py, gives it the kernel's); its first cells run in the browser and
    show their outputs, none of them an error or a stderr (warning) box."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is installed with the test extra")
    url, token = lab
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=HANG_S * 1000)
            page.get_by_text("| Idle").wait_for(timeout=HANG_S * 1000)  # the status bar: the kernel started
            assert page.locator(".jp-Dialog").count() == 0, page.locator(".jp-Dialog").inner_text()
            page.wait_for_timeout(2000)  # the kernel's language_info reaches the notebook's metadata
            assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, "the notebook opened modified"
            page.locator(".jp-Notebook .jp-CodeCell").first.click()
            for _ in range(2 * CELLS):  # a markdown cell between two code cells takes a press too
                page.keyboard.press("Shift+Enter")
            page.wait_for_function(  # an execution count in each cell run ("[1]:"; "[*]:" while it runs)
                "[...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]"
                f".filter(e => /\\[\\d+\\]/.test(e.textContent)).length >= {CELLS}",
                timeout=HANG_S * 1000,
            )
            page.wait_for_timeout(1000)  # the last outputs' rendering
            outputs = page.locator(".jp-Notebook .jp-OutputArea-output")
            stderr = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
            text = page.locator(".jp-Notebook").inner_text()
            assert outputs.count() >= CELLS, text[:3000]
            assert stderr.count() == 0, stderr.first.inner_text()
            assert errors.count() == 0, errors.first.inner_text()
            assert "Reading:" in text and "device:" in text  # the header and the first cell's own output
        finally:
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))
            browser.close()
