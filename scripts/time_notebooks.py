"""Run solution notebooks end to end, timing each, and record the wall times per machine in
workshop_lessons/reference/notebook_times.json, which the header of every notebook reads (`workshop_lessons.header`). Each
notebook runs in a fresh process, cell by cell from its jupytext percent file (plain Python), as a kernel would:
a cell tagged raises-exception may raise (its error is printed and the next cell runs); any other error stops
the notebook, which is recorded as failed, with its exit code. Each code cell's wall time is recorded too
("cells": the line of its `# %%` and its seconds, slowest first), so an instructor sees where the minutes go, and
the DeepSpeed ops it JIT-compiled ("ops_built"): a one-time cost, paid by the first notebook on a machine that needs
each op (notebooks run in course order pay each once).

    python scripts/time_notebooks.py 01_baseline 02_zero_stages     # in solutions/, on this machine

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


def main(names: list[str]) -> int:
    import torch

    import workshop_lessons as lessons
    from workshop_lib import env
    from workshop_lib.config import recipe_settings

    gpus = torch.cuda.device_count()  # a machine of several GPUs is timed apart from one of its kind with one
    device = f"{gpus} x {env.device_name()}" if gpus > 1 else env.device_name()
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
        cells = json.loads(cell_times.read_text()) if cell_times.exists() else []
        times.setdefault(device, {})[name] = {
            "seconds": seconds,
            "returncode": rc,
            "date": time.strftime("%Y-%m-%d"),
            "model": ", ".join(trained_models(name, started)) or model,
            "cells": sorted(cells, key=lambda c: -c[1])[:8],
            "ops_built": sorted(built_ops() - ops),
        }
        print(f"{name}: {seconds:.0f} s on {device}, exit code {rc}", flush=True)
        failed += rc != 0
        TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


def run_cells(path: str, times_path: str | None = None) -> None:
    """Execute the percent-format notebook `path` cell by cell in one namespace; a cell whose `# %%` line
    carries the raises-exception tag may raise: its error is printed and the run goes on. After each cell,
    `times_path` (JSON) holds [[line of the cell's `# %%`, wall seconds], ...] of the cells run so far."""
    import re
    import traceback

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
        t0 = time.perf_counter()
        try:  # blank lines before the cell keep the file's line numbers in a traceback
            exec(compile("\n" * first + "".join(lines), path, "exec"), namespace)
        except Exception:
            if not re.search(r"tags=\[[^]]*raises-exception", head):
                raise
            print(f"(a cell tagged raises-exception raised, as expected)\n{traceback.format_exc(limit=1)}", flush=True)
        finally:
            done.append([first, round(time.perf_counter() - t0, 1)])
            if times_path:
                Path(times_path).parent.mkdir(parents=True, exist_ok=True)
                Path(times_path).write_text(json.dumps(done))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cells"]:
        run_cells(sys.argv[2], (sys.argv[3:4] or [None])[0])
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
