# Sourced by scripts/main.sh and scripts/test.sh: create .venv (once) and install the workshop into it.
# With a GPU: the newest torch with CUDA from PyPI. Without: the CPU build of torch 2.13.0 (small, fast).
# An already active environment (conda, venv) is used as it is.
if [ -z "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  source .venv/bin/activate
fi
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }  # drop pip's notes about unused local indexes
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then quiet pip install -q torch
  else quiet pip install -q torch==2.13.0; fi
fi
python -c "import workshop_lib, pytest, nbmake" 2>/dev/null || quiet pip install -q -e ".[test]"
