# The README's set-up (`bash scripts/setup.sh`), also sourced by scripts/main.sh and scripts/test.sh: create
# .venv (once) and install into it what the work needs, saying what each part is and how long it took. An
# already active environment (conda, venv) is used as it is.
#   bash scripts/setup.sh               # everything: runs, notebooks, tests
#   WORKSHOP_SETUP=run bash scripts/setup.sh   # what `workshop run` needs, no more (scripts/main.sh)
# torch: with a GPU the newest CUDA build from PyPI; without, the CPU build of torch 2.13.0 (small, fast).
# DeepSpeed's optimizer ops are compiled here, once, with their time printed: CPU Adam (offload) always,
# and with the full set-up every op the notebooks and tests use, into this environment's extension cache
# (scripts/build_ops.py); no run or notebook compiles them later. (Just in time, as runs would: DeepSpeed's
# install-time build, DS_BUILD_CPU_ADAM=1, compiles one file at a time and took about twice as long on 2 cores.)
_setup_mode=${WORKSHOP_SETUP:-full}
if [ -z "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "Creating the virtual environment .venv"; python3 -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip 2> >(grep -v "^WARNING: Location" >&2)  # Debian's 23.0 builds DeepSpeed the legacy way
  fi
  source .venv/bin/activate
fi
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }  # drop pip's notes about unused local indexes
installing() { echo "Installing $1 into $(python -c 'import sys; print(sys.prefix)') ..."; SECONDS=0; }
_gpu=0; if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then _gpu=1; fi
if ! python -c "import torch" 2>/dev/null; then
  if [ $_gpu = 1 ]; then
    installing "torch with CUDA (a download of several GB)"; quiet pip install -q torch
  else
    installing "torch 2.13.0, CPU build (no GPU here)"; quiet pip install -q torch==2.13.0
  fi
  echo "  done in ${SECONDS} s"
fi
# installed, not merely importable from this folder: the package's metadata and what it needs
# (their metadata, not an import: importing DeepSpeed here would print its accelerator warning on a CPU)
_check="deepspeed-workshop deepspeed transformers datasets"
if [ "$_setup_mode" = run ]; then _extras=""; else _extras="[test]"; _check="$_check pytest nbmake pytest-xdist jupytext playwright"; fi
if ! python -c "import importlib.metadata as m, sys; [m.version(n) for n in sys.argv[1:]]" $_check 2>/dev/null; then
  installing "the workshop and what it needs (deepspeed, transformers, datasets, accelerate${_extras:+, jupyterlab, pytest, ...})"
  # (setuptools's box about editable installs and same-named folders: this folder is the package's own)
  PYTHONWARNINGS="ignore:Editable installation" quiet pip install -q -e ".$_extras"
  echo "  done in ${SECONDS} s"
fi
if [ "$_setup_mode" != run ]; then  # the course's Jupyter server extension (workshop_lessons/jupyter.py):
  # pyproject's data-files reach an environment through a wheel's install, not an editable one
  _cfg=$(python -c 'import sys; print(sys.prefix)')/etc/jupyter/jupyter_server_config.d
  mkdir -p "$_cfg" && cp workshop_lessons/jupyter_config/workshop_course.json "$_cfg/"
fi
# Compile DeepSpeed's ops now (announced and timed), unless this environment already has them: CPU Adam (offload);
# with the full set-up every op a notebook or test uses: fused Adam (the stages without offload, on a CPU too), and
# on a CPU the shared-memory collectives of several ranks (better here than inside a run's warm-up)
_ops="CPUAdamBuilder"; { [ $_gpu = 1 ] || [ "$_setup_mode" != run ]; } && _ops="FusedAdamBuilder $_ops"
[ "$_setup_mode" != run ] && [ $_gpu = 0 ] && _ops="$_ops ShareMemCommBuilder"
python scripts/build_ops.py $_ops
unset _setup_mode _extras _check _gpu _ops
