"""Run solution notebooks end to end as scripts (each jupytext percent file is plain Python), timing each,
and record the wall times per machine in docs/notebook_times.json, which the header of every notebook reads
(`workshop_lib.lessons.header`). A notebook that fails is recorded as failed, with its exit code.

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
        rc = subprocess.run([sys.executable, f"{name}.py"], cwd=ROOT / "solutions").returncode
        seconds = round(time.perf_counter() - t0, 1)
        times.setdefault(device, {})[name] = {"seconds": seconds, "returncode": rc,
                                              "date": time.strftime("%Y-%m-%d"), "model": model}
        print(f"{name}: {seconds:.0f} s on {device}, exit code {rc}", flush=True)
        failed += rc != 0
        TIMES.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
