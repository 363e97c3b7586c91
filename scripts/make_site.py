"""The course as a static site, to read without a GPU: every solution notebook with its outputs (tables, plots,
timings) as executed on the GPU reference machine, beside its learner version, one HTML page each, linked from an
index. Outside the installed package (scripts/, site/); the executed notebooks are stored in site/executed/ and only
`execute` writes them: `build` never runs a notebook (as Jupyter Book publishes stored outputs), so it takes seconds
and needs no GPU.

    python scripts/make_site.py execute              # on the GPU reference machine: every solution notebook
    python scripts/make_site.py execute --cpu 00_setup 01_baseline   # here: the tiny model on the CPU
    python scripts/make_site.py build --out site_build   # then open site_build/index.html

`execute` runs solutions/NAME.py in solutions/ through a Jupyter kernel (nbclient, ipykernel and jupytext: the
notebooks extra; a cell tagged raises-exception may raise; no time-out; WORKSHOP_MAX_STEPS is passed on and
recorded) and stores site/executed/NAME.ipynb: its outputs and images, less the widgets' state (a static page cannot
run them; their text stays), with metadata["workshop_site"]: the machine that executed it (`env.device_name`, "N x"
for several GPUs), the date, the commit, the wall seconds, the command and the source's sha256. On a GPU, at the
notebook's own length, it also records the wall seconds in workshop_lessons/reference/notebook_times.json, whose
times every notebook's header shows (as scripts/time_notebooks.py does; an entry's per-cell times, of another
execution, are dropped). `build` writes OUT (a folder this command made, or a new one): index.html,
solutions/NAME.html and course/NAME.html (nbconvert's lab template, self-contained: images inline, no script from
another host), each page labelled from that metadata; a stored notebook whose source has changed since says so on
its page.
MyST / Jupyter Book 2 was not used: its site build downloads its theme from api.mystmd.org and GitHub at build
time, which neither this machine nor CI reaches (they reach package registries only).
"""

import argparse
import hashlib
import html
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import time_notebooks  # beside this script: the run times every notebook's header reads

ROOT = Path(__file__).resolve().parent.parent
EXECUTED = ROOT / "site" / "executed"
MARK = ".made_by_make_site"  # in OUT: a folder this command wrote, which a rebuild may replace
WIDGET = "application/vnd.jupyter.widget-view+json"


def names() -> list[str]:
    """The course's notebooks in reading order: the stems of solutions/[0-9]*.py."""
    return sorted(p.stem for p in (ROOT / "solutions").glob("[0-9]*.py"))


def source_sha(name: str) -> str:
    return hashlib.sha256((ROOT / "solutions" / f"{name}.py").read_bytes()).hexdigest()


def strip_widgets(nb) -> None:
    """Drop the widgets' state and views (a static page has no kernel to draw them); their text/plain stays."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        outs = []
        for out in cell.get("outputs", []):
            out.get("data", {}).pop(WIDGET, None)
            if out.get("output_type") not in ("display_data", "execute_result") or out.get("data"):
                outs.append(out)
        if cell.cell_type == "code":
            cell.outputs = outs
            cell.metadata.pop("execution", None)  # nbclient's timestamps: churn in every diff


def execute(selected: list[str], cpu: bool) -> int:
    """Execute each notebook of `selected` (all when empty) and store it in site/executed/. Returns the count
    that failed (their stored notebooks are left as they were)."""
    import jupytext
    import nbclient
    import nbformat

    if cpu:  # the kernel inherits this environment: no GPU, the tiny model
        os.environ.update(CUDA_VISIBLE_DEVICES="", WORKSHOP_TINY="1")
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend draws the plots into the outputs
    gpus, machine = time_notebooks.machine()  # as notebook_times.json names it
    # SITE_COMMIT: the caller names the commit where git would answer wrongly (a device's copy of a working tree
    # answers with the commit its .git was copied at)
    commit = (
        os.environ.get("SITE_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    # the variables that change the runs (runs.notebook_run_options): another run length, random weights
    changed = [f"{k}={os.environ[k]} " for k in ("WORKSHOP_MAX_STEPS", "WORKSHOP_RANDOM_WEIGHTS") if k in os.environ]
    command = "".join(changed) + "python scripts/make_site.py execute"
    command += " --cpu" if cpu else ""
    EXECUTED.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in selected or names():
        nb = jupytext.read(ROOT / "solutions" / f"{name}.py")
        ops, started, t0 = time_notebooks.built_ops(), time.time(), time.perf_counter()
        try:
            nbclient.NotebookClient(
                nb, timeout=None, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "solutions")}}
            ).execute()
        except nbclient.exceptions.CellExecutionError as e:
            print(f"{name}: FAILED, not stored\n{str(e)[-3000:]}", flush=True)
            failed += 1
            continue
        seconds = round(time.perf_counter() - t0, 1)
        strip_widgets(nb)
        nb.metadata["workshop_site"] = {
            "machine": machine,
            "date": time.strftime("%Y-%m-%d"),
            "commit": commit,
            "seconds": seconds,
            "command": command,
            "source_sha256": source_sha(name),
        }
        nbformat.write(nb, EXECUTED / f"{name}.ipynb")
        if gpus and "WORKSHOP_MAX_STEPS" not in os.environ:  # the notebook's own length on a GPU: its header's time
            times = json.loads(time_notebooks.TIMES.read_text())
            entry = times.setdefault(machine, {}).setdefault(name, {})
            entry.pop("cells", None)  # time_notebooks' per-cell times, of another execution; its words stay
            entry.update(
                seconds=seconds,
                returncode=0,
                date=time.strftime("%Y-%m-%d"),
                model=", ".join(time_notebooks.trained_models(name, started)),
                ops_built=sorted(time_notebooks.built_ops() - ops),
            )
            time_notebooks.TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {seconds:.0f} s on {machine} -> {(EXECUTED / f'{name}.ipynb').relative_to(ROOT)}", flush=True)
    return failed


STYLE = (
    "<style>.site-bar{font:14px/1.5 system-ui,sans-serif;background:#f3f5f8;border-bottom:1px solid #ccd;"
    "padding:8px 16px;margin:0 0 8px}.site-bar a{margin-right:1em}.site-stale{color:#a40}</style>"
)


def bar(links: list[tuple[str, str]], note: str) -> str:
    """The navigation bar put at the top of every page: `links` as (href, text), then `note` (HTML)."""
    return (
        '<nav class="site-bar">'
        + "".join(f'<a href="{h}">{html.escape(t)}</a>' for h, t in links)
        + f"<div>{note}</div></nav>"
    )


def render(exporter, nb, title: str, top: str) -> str:
    """`nb` as one self-contained HTML page (nbconvert's lab template) titled `title`, with `top` (HTML) first in
    its body and our style in its head; the template's empty MathJax and require.js tags are left out (the course
    has no math, and nothing is fetched from another host)."""
    body = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})[0]
    body = body.replace('<script src=""></script>', "").replace('<script src=""> </script>', "")
    body = body.replace("</head>", STYLE + "</head>", 1)
    start = body.index("<body")
    end = body.index(">", start) + 1
    return body[:end] + top + body[end:]


def build(out: Path) -> None:
    """Write the site into `out` from site/executed/ (the solutions) and course/ (the learner versions)."""
    import jupytext
    import nbformat
    from nbconvert import HTMLExporter

    all_names = names()
    missing = [n for n in all_names if not (EXECUTED / f"{n}.ipynb").is_file()]
    if missing:
        sys.exit(
            f"No executed notebook stored for {', '.join(missing)} in site/executed/. "
            f"To fix: python scripts/make_site.py execute {' '.join(missing)} (on the GPU machine; --cpu here)"
        )
    if out.exists() and not (out / MARK).is_file():
        sys.exit(f"{out} exists and was not written by this command. To fix: give --out a new folder")
    t0 = time.perf_counter()
    shutil.rmtree(out, ignore_errors=True)
    (out / "solutions").mkdir(parents=True)
    (out / "course").mkdir()
    (out / MARK).write_text("")
    # no MathJax or require.js from a CDN: the course's outputs are tables and images
    exporter = HTMLExporter(template_name="lab", mathjax_url="", require_js_url="", embed_images=True)
    rows = []
    for i, name in enumerate(all_names):
        nb = nbformat.read(EXECUTED / f"{name}.ipynb", as_version=4)
        meta = nb.metadata.get("workshop_site", {})
        stale = meta.get("source_sha256") != source_sha(name)
        ran = (
            f"Executed on <b>{html.escape(meta.get('machine', 'an unrecorded machine'))}</b> on {meta.get('date', '?')}"
            f" (commit {meta.get('commit', '?')}) in {meta.get('seconds', 0):,.0f} s by "
            f"<code>{html.escape(meta.get('command', '?'))}</code>."
        )
        if stale:
            ran += ' <span class="site-stale">solutions/' + name + ".py has changed since: outputs may differ.</span>"
        nav = [("../index.html", "Index")]
        nav += [(f"{all_names[i - 1]}.html", f"< {all_names[i - 1]}")] if i else []
        nav += [(f"{all_names[i + 1]}.html", f"{all_names[i + 1]} >")] if i + 1 < len(all_names) else []
        (out / "solutions" / f"{name}.html").write_text(
            render(
                exporter,
                nb,
                f"{name} (executed)",
                bar(nav + [(f"../course/{name}.html", "learner version")], f"Solution {name}. {ran}"),
            )
        )
        learner = jupytext.read(ROOT / "course" / f"{name}.py")
        (out / "course" / f"{name}.html").write_text(
            render(
                exporter,
                learner,
                f"{name} (learner version)",
                bar(
                    [("../index.html", "Index"), (f"../solutions/{name}.html", "executed solution")],
                    f"Learner version of {name} (course/{name}.py), not executed: its outputs are the learner's own.",
                ),
            )
        )
        title = next(
            (ln[2:] for c in nb.cells if c.cell_type == "markdown" for ln in c.source.splitlines() if ln[:2] == "# "),
            name,
        )
        images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
        rows.append(
            f"<tr><td>{name}</td><td>{html.escape(title)}</td>"
            f'<td><a href="solutions/{name}.html">solution, executed</a></td><td><a href="course/{name}.html">learner '
            "version</a></td>"
            f"<td>{html.escape(meta.get('machine', '?'))}</td><td>{meta.get('seconds', 0):,.0f} s</td>"
            f"<td>{images}</td><td>{'source changed since' if stale else 'current'}</td></tr>"
        )
    (out / "index.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>DeepSpeed workshop: the course</title>'
        "<style>body{font:15px/1.5 system-ui,sans-serif;max-width:72em;margin:2em auto}td,th{padding:4px 10px;"
        "border-bottom:1px solid #ddd;text-align:left}</style></head><body><h1>DeepSpeed workshop: the course</h1>"
        "<p>Each notebook twice: the solution with its outputs (tables, plots, timings) as executed on the machine "
        "named, stored in site/executed/ and never re-executed to build this site, and the learner version, "
        "whose blanks the learner fills. Regenerate the outputs with <code>python scripts/make_site.py execute"
        "</code> on a GPU, then <code>python scripts/make_site.py build --out site_build</code>.</p><table>"
        "<tr><th>notebook</th><th>title</th><th></th><th></th><th>executed on</th><th>time</th><th>plots</th>"
        "<th>outputs</th></tr>" + "".join(rows) + "</table></body></html>"
    )
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    files = sum(1 for p in out.rglob("*.html"))
    print(f"site: {out} ({files} pages, {size / 2**20:.1f} MiB) in {time.perf_counter() - t0:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("execute", help="execute solution notebooks and store them in site/executed/")
    ex.add_argument("names", nargs="*", help="notebooks (e.g. 02_zero_stages); all when none")
    ex.add_argument("--cpu", action="store_true", help="no GPU: the tiny model on the CPU (WORKSHOP_TINY=1)")
    bu = sub.add_parser("build", help="build the static site from site/executed/ and course/")
    bu.add_argument("--out", type=Path, default=ROOT / "site_build", help="the site's folder (default site_build)")
    args = parser.parse_args(argv)
    if args.command == "execute":
        unknown = sorted(set(args.names) - set(names()))
        if unknown:
            parser.error(f"no notebook {', '.join(unknown)} in solutions/ (there are: {', '.join(names())})")
        return 1 if execute(args.names, args.cpu) else 0
    build(args.out.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
