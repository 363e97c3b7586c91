#!/usr/bin/env bash
# A non-editable `pip install .` runs notebook 02 from outside the checkout, its GPU reference runs beside the
# learner's figures: the package data reaches an install. A new venv sees the active environment's packages
# (a .pth file: nothing is downloaded again) and holds its own copy of the workshop (not a link to this folder).
#   bash .ci/non_editable.sh [VENV_DIR]     # with the set-up's environment active (source .venv/bin/activate)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-/tmp/non-editable-ci}
rm -rf "$venv" && python -m venv --without-pip "$venv"
site() { "$1" -c "import site; print(site.getsitepackages()[0])"; }
site python > "$(site "$venv/bin/python")/outer.pth"
# the same torch as the outer environment: its compiled DeepSpeed ops serve (workshop_lib.env's per-environment cache)
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$(python -c "import os, workshop_lib.env; print(os.environ['TORCH_EXTENSIONS_DIR'])" 2>/dev/null)}
src=$(mktemp -d) && git ls-files -z | xargs -0 cp --parents -t "$src"  # built there: no build/ left here
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation "$src" 2> >(grep -v "^WARNING: Location" >&2)
work=$(mktemp -d) && mkdir "$work/course" && cp -r slurm "$work/" && cp course/02_zero_stages.py "$work/course/" && cd "$work/course"  # a learner's folder
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WORKSHOP_TINY=1 MPLBACKEND=Agg timeout 1200 "$venv/bin/python" - <<'PY'
import json, os, sys
import jupytext, nbclient
import workshop_lessons, workshop_lib

for m in (workshop_lib, workshop_lessons):
    assert m.__file__.startswith(sys.prefix), f"{m.__name__} imported from {m.__file__}, not the new install"
nb = jupytext.read("02_zero_stages.py")
nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": os.getcwd()}}).execute()
outputs = json.dumps([o for c in nb.cells for o in c.get("outputs", [])])
assert "Reference: NVIDIA H100" in outputs, "no GPU reference beside the learner's figures"
# what a learner would see as red boxes: any warning a library printed to the cell's stderr
red = [line for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stderr"
       for line in o.get("text", "").splitlines() if "warn" in line.lower()]
assert not red, "warnings in the executed notebook's outputs:\n" + "\n".join(red[:20])
print(f"non-editable install ({workshop_lessons.__file__}): notebook 02 ran in {os.getcwd()}, the H100 "
      "reference beside the learner's figures")
PY
