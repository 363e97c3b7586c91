"""Run solution notebooks end to end, timing each, and record the wall times per machine in
docs/notebook_times.json, which the header of every notebook reads (`workshop_lib.lessons.header`). Each
notebook runs in a fresh process, cell by cell from its jupytext percent file (plain Python), as a kernel would:
a cell tagged raises-exception may raise (its error is printed and the next cell runs); any other error stops
the notebook, which is recorded as failed, with its exit code.

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
TIMES = ROOT / "docs" / "notebook_times.json"


def main(names: list[str]) -> int:
    from workshop_lib import env
    from workshop_lib.config import RECIPES

    device = env.device_name()
    model = "tiny model" if env.notebook_run_options()["tiny"] else RECIPES["default"].model
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    failed = 0
    for name in names:
        t0 = time.perf_counter()
        rc = subprocess.run([sys.executable, __file__, "--cells", f"{name}.py"], cwd=ROOT / "solutions").returncode
        seconds = round(time.perf_counter() - t0, 1)
        times.setdefault(device, {})[name] = {"seconds": seconds, "returncode": rc,
                                              "date": time.strftime("%Y-%m-%d"), "model": model}
        print(f"{name}: {seconds:.0f} s on {device}, exit code {rc}", flush=True)
        failed += rc != 0
        TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


def run_cells(path: str) -> None:
    """Execute the percent-format notebook `path` cell by cell in one namespace; a cell whose `# %%` line
    carries the raises-exception tag may raise: its error is printed and the run goes on."""
    import re
    import traceback

    cells, n = [["", 0, []]], 0  # (the cell's "# %%" line, its first line's index, its lines)
    for n, line in enumerate(Path(path).read_text().splitlines(keepends=True)):
        if line.startswith("# %%"):
            cells.append([line, n + 1, []])
        else:
            cells[-1][2].append(line)
    namespace = {"__name__": "__main__"}
    for head, first, lines in cells:
        if "[markdown]" in head:
            continue
        try:  # blank lines before the cell keep the file's line numbers in a traceback
            exec(compile("\n" * first + "".join(lines), path, "exec"), namespace)
        except Exception:
            if not re.search(r"tags=\[[^]]*raises-exception", head):
                raise
            print(f"(a cell tagged raises-exception raised, as expected)\n{traceback.format_exc(limit=1)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cells"]:
        run_cells(sys.argv[2])
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
