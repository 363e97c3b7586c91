# Sourced by scripts/main.sh and scripts/test.sh: create .venv (once) and install the workshop into it,
# saying what it installs and how long it took. With a GPU: the newest torch with CUDA from PyPI.
# Without: the CPU build of torch 2.13.0 (small, fast). An already active environment (conda, venv) is
# used as it is.
if [ -z "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]; then
  if [ ! -x .venv/bin/python ]; then echo "Creating the virtual environment .venv"; python3 -m venv .venv; fi
  source .venv/bin/activate
fi
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }  # drop pip's notes about unused local indexes
installing() { echo "Installing $1 into $(python -c 'import sys; print(sys.prefix)') ..."; SECONDS=0; }
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    installing "torch with CUDA (a download of several GB)"; quiet pip install -q torch
  else
    installing "torch 2.13.0, CPU build (no GPU here)"; quiet pip install -q torch==2.13.0
  fi
  echo "  done in ${SECONDS} s"
fi
if ! python -c "import workshop_lib, pytest, nbmake, xdist" 2>/dev/null; then
  installing "the workshop and its dependencies (deepspeed, transformers, datasets, accelerate, jupyterlab, pytest, ...)"
  quiet pip install -q -e ".[test]"
  echo "  done in ${SECONDS} s. DeepSpeed builds its ops (CPU Adam, fused Adam) on their first use, about a minute each."
fi
