"""The course as a site (scripts/make_site.py): built by its one command from the stored executed notebooks
(site/executed/) and the learner notebooks (course/), served on loopback and read in headless Chromium (Debian's,
driven by Playwright as in test_browser.py): every notebook's two pages are reached from the index by links, every
plot a stored notebook holds is drawn, every link between pages and every in-page anchor resolves, nothing is
fetched from another host, and each solution page names the machine its stored notebook says executed it. A
screenshot of the first page with a plot is kept in logs/ (CI's artefacts)."""

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest

from conftest import HANG_S

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NAMES = sorted(p.stem for p in (ROOT / "solutions").glob("[0-9]*.py"))
SCREENSHOT = ROOT / "logs" / "site-plot.png"


def stored(name: str) -> dict:
    return json.loads((ROOT / "site" / "executed" / f"{name}.ipynb").read_text())


def plots(name: str) -> int:
    """The PNG images among the outputs of the stored executed notebook `name`."""
    return sum("image/png" in o.get("data", {}) for c in stored(name)["cells"] for o in c.get("outputs", []))


def test_the_build_refuses_a_folder_it_did_not_write(tmp_path):
    """A folder holding someone's file is left as it was, and the command says what to do."""
    (tmp_path / "notes.txt").write_text("mine")
    run = subprocess.run(
        [sys.executable, "scripts/make_site.py", "build", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "To fix:" in run.stderr, run.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "mine"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # a line per request: the test's own failures say what failed
        pass


@pytest.fixture
def site(tmp_path):
    """The site built by its one command into a new folder, served on 127.0.0.1 (a free port)."""
    out = tmp_path / "site"
    subprocess.run(
        [sys.executable, "scripts/make_site.py", "build", "--out", str(out)], cwd=ROOT, check=True, timeout=HANG_S
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium here: the site's test needs Debian's chromium package "
    "(sudo apt-get install chromium; .ci/run installs it)",
)
def test_the_site_shows_every_notebook_with_its_plots_and_no_broken_link(site):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is installed with the test extra")
    origin = urlparse(site).netloc
    failures, foreign = [], []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("request", lambda r: urlparse(r.url).netloc in (origin, "") or foreign.append(r.url))
        page.on("requestfailed", lambda r: failures.append(f"{r.url}: {r.failure}"))
        page.on("response", lambda r: r.status < 400 or failures.append(f"{r.url}: HTTP {r.status}"))
        try:
            todo, seen, anchors, shot = [f"{site}/index.html"], set(), {}, False
            while todo:  # every page reachable by links from the index, each opened once
                url = todo.pop(0)
                if url in seen:
                    continue
                seen.add(url)
                response = page.goto(url)
                assert response is not None and response.ok, url
                links = page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
                for link in links:
                    target, fragment = urldefrag(link)
                    if urlparse(target).netloc != origin:
                        continue  # a link out of the site (none is fetched: see `foreign`)
                    if fragment:
                        anchors.setdefault(target, set()).add(fragment)
                    todo.append(target)
                path = urlparse(url).path.lstrip("/")
                if path.startswith("solutions/"):
                    name = Path(path).stem
                    machine = stored(name)["metadata"]["workshop_site"]["machine"]
                    assert machine in page.locator(".site-bar").inner_text(), (name, machine)
                    drawn = page.eval_on_selector_all(
                        ".jp-OutputArea-output img", "is => is.filter(i => i.complete && i.naturalWidth > 0).length"
                    )
                    assert drawn >= plots(name), f"{name}: {drawn} of its {plots(name)} plots drawn"
                    if plots(name) and not shot:
                        SCREENSHOT.parent.mkdir(exist_ok=True)
                        page.locator(".jp-OutputArea-output img").first.scroll_into_view_if_needed()
                        page.screenshot(path=str(SCREENSHOT))
                        shot = True
            # each anchor names an element of its page, as a browser finds it: the fragment as written, else
            # percent-decoded (HTML's indicated element)
            found = (
                "fs => fs.filter(f => !(document.getElementById(f) || document.getElementById(decodeURIComponent(f))))"
            )
            for target, fragments in anchors.items():
                page.goto(target)
                assert page.evaluate(found, sorted(fragments)) == [], target
        finally:
            browser.close()
    pages = {urlparse(u).path.lstrip("/") for u in seen}
    expected = {"index.html"} | {f"{d}/{n}.html" for n in NAMES for d in ("solutions", "course")}
    assert expected <= pages, sorted(expected - pages)
    assert not failures, failures[:10]
    assert not foreign, foreign[:10]
    assert any(plots(n) for n in NAMES), "no stored notebook holds a plot: the plots' check checked nothing"
