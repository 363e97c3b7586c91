"""Run solution notebooks end to end, timing each, and record the wall times per machine in
workshop_lessons/reference/notebook_times.json, which the header of every notebook reads (`workshop_lessons.header`).
Each notebook runs in a fresh process, cell by cell from its jupytext percent file (plain Python), as a kernel would: a
cell tagged raises-exception may raise (its error is printed and the next cell runs); any other error stops the
notebook, which is recorded as failed, with its exit code. Each code cell's wall time is recorded too ("cells": the line
of its `# %%` and its seconds, slowest first), so an instructor sees where the minutes go, and the words of the text its
cells print or display, as a kernel shows them ("output_words": what the timetable, scripts/make_timetable.py, counts as
read beside the prose), and the DeepSpeed ops it JIT-compiled ("ops_built"): a one-time cost, paid by the first notebook
on a machine that needs each op (notebooks run in course order pay each once).

    python scripts/time_notebooks.py 01_baseline 02_zero_stages     # in solutions/, on this machine
    python scripts/time_notebooks.py --words-only 02_zero_stages     # only "output_words", the seconds kept

Needs IPython (the notebooks import IPython.display). Runs happen in solutions/ and write solutions/runs/.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TIMES = ROOT / "workshop_lessons" / "reference" / "notebook_times.json"


def built_ops() -> set[str]:
    """The JIT-compiled C++/CUDA ops in torch's extension cache (TORCH_EXTENSIONS_DIR, which `workshop_lib.env` sets
    per environment): DeepSpeed's cpu_adam, fused_adam, async_io..., one folder each with its .so."""
    from torch.utils.cpp_extension import get_default_build_root

    return {so.parent.name for so in Path(get_default_build_root()).glob("**/*.so")}


def trained_models(name: str, since: float) -> list[str]:
    """The models of the runs notebook `name` wrote (solutions/runs/NAME/**/run_config.json, modified after
    `since`, a time.time()), sorted, "tiny model" for a --tiny run: what its header names."""
    found = set()
    for cfg in (ROOT / "solutions" / "runs" / name).glob("**/run_config.json"):
        if cfg.stat().st_mtime >= since:
            run = json.loads(cfg.read_text())
            found.add("tiny model" if run.get("tiny") else run.get("model"))
    return sorted(m for m in found if m)


def machine() -> tuple[int, str]:
    """(the GPUs this process sees, this machine's name in notebook_times.json: `env.device_name()`, "N x ..." with
    N > 1 GPUs, since a machine of several GPUs is timed apart from one of its kind with one)."""
    import torch

    from workshop_lib import env

    gpus = torch.cuda.device_count()
    return gpus, f"{gpus} x {env.device_name()}" if gpus > 1 else env.device_name()


def main(names: list[str], words_only: bool = False) -> int:
    import workshop_lessons as lessons
    from workshop_lib.config import recipe_settings

    device = machine()[1]
    model = (
        "tiny model" if lessons.notebook_run_options()["tiny"] else recipe_settings("default")["model"]
    )  # when no run says
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    failed = 0
    for name in names:
        cell_times = ROOT / "solutions" / "runs" / f".{name}.cells.json"
        cell_times.unlink(missing_ok=True)
        ops, started = built_ops(), time.time()
        t0 = time.perf_counter()
        rc = subprocess.run(
            [sys.executable, __file__, "--cells", f"{name}.py", str(cell_times)], cwd=ROOT / "solutions"
        ).returncode
        seconds = round(time.perf_counter() - t0, 1)
        cells = json.loads(cell_times.read_text()) if cell_times.exists() else {"cells": [], "output_words": None}
        # --words-only (a busy machine, whose seconds are not the notebook's): the words, the entry's seconds kept
        if words_only and rc == 0 and name in times.get(device, {}):
            times[device][name]["output_words"] = cells["output_words"]
        else:
            times.setdefault(device, {})[name] = {
                "seconds": seconds,
                "returncode": rc,
                "date": time.strftime("%Y-%m-%d"),
                "model": ", ".join(trained_models(name, started)) or model,
                "cells": sorted(cells["cells"], key=lambda c: -c[1])[:8],
                "output_words": cells["output_words"],
                "ops_built": sorted(built_ops() - ops),
            }
        print(f"{name}: {seconds:.0f} s on {device}, exit code {rc}", flush=True)
        failed += rc != 0
        TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


class _Counted:
    """sys.stdout that counts the words written to it while `counting` (what a learner reads of a cell's output)."""

    def __init__(self, out):
        self.out, self.words, self.counting = out, 0, True

    def write(self, text: str) -> int:
        self.words += len(text.split()) if self.counting else 0
        return self.out.write(text)

    def __getattr__(self, name):
        return getattr(self.out, name)


def run_cells(path: str, times_path: str | None = None) -> None:
    """Execute the percent-format notebook `path` cell by cell in one namespace, as a kernel does: in an IPython shell,
    a display (a table, a Markdown object) printed as its text (markdown, else HTML's, else plain; none for an image), a
    cell's last expression displayed when it is not None. A cell whose `# %%` line carries the raises-exception tag may
    raise: its error is printed and the run goes on. After each cell, `times_path` (JSON) holds {"cells": [[line of the
    cell's `# %%`, wall seconds], ...], "output_words": N}: the words of the text the cells printed or displayed so far,
    but the solution cells' (a learner's notebook has them blank)."""
    import ast
    import re
    import traceback

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.display import display

    out = sys.stdout = _Counted(sys.stdout)
    shell, shown = InteractiveShell.instance(), {}
    # as in a kernel (transformers' and tqdm's test): the Trainer's progress table, not its log lines, is shown
    shell.config.IPKernelApp.quiet = True

    def publish(data: dict, *args, transient=None, update=False, **kwargs) -> None:
        """A display printed as its text (a table: every column of its HTML); an update of a display (the progress
        table, every step) replaces its words, as a kernel shows the last state only."""
        html = re.sub(r"<[^>]+>", " ", re.sub(r"(?s)<style.*?</style>", "", data.get("text/html", "")))
        text = "" if any(k.startswith("image/") for k in data) else data.get("text/markdown") or html.strip() and html
        text = text or data.get("text/plain", "")
        key = (transient or {}).get("display_id")
        out.words -= shown.pop(key, 0) if update and out.counting else 0
        shown[key] = len(text.split())
        print(text)

    shell.display_pub.publish = publish
    cells, n = [["", 0, []]], 0  # (the cell's "# %%" line, its first line's index, its lines)
    for n, line in enumerate(Path(path).read_text().splitlines(keepends=True)):
        if line.startswith("# %%"):
            cells.append([line, n + 1, []])
        else:
            cells[-1][2].append(line)
    namespace, done = {"__name__": "__main__"}, []
    for head, first, lines in cells:
        if "[markdown]" in head:
            continue
        t0, out.counting = time.perf_counter(), not re.search(r"tags=\[[^]]*solution", head)
        try:  # blank lines before the cell keep the file's line numbers in a traceback
            tree = ast.parse("\n" * first + "".join(lines), path)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, path, "exec"), namespace)
            value = eval(compile(ast.Expression(last.value), path, "eval"), namespace) if last else None
            if value is not None:
                display(value)
        except Exception:
            if not re.search(r"tags=\[[^]]*raises-exception", head):
                raise
            print(f"(a cell tagged raises-exception raised, as expected)\n{traceback.format_exc(limit=1)}", flush=True)
        finally:
            done.append([first, round(time.perf_counter() - t0, 1)])
            if times_path:
                Path(times_path).parent.mkdir(parents=True, exist_ok=True)
                Path(times_path).write_text(json.dumps({"cells": done, "output_words": out.words}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cells"]:
        run_cells(sys.argv[2], (sys.argv[3:4] or [None])[0])
        sys.exit(0)
    sys.exit(main([a for a in sys.argv[1:] if a != "--words-only"], "--words-only" in sys.argv))
