#!/usr/bin/env bash
# Set up a virtual environment (.venv) and run every test: unit tests, the lab's (lab/tests), every experiment through
# `workshop run --tiny` on the CPU with real DeepSpeed, the batch scripts on a SLURM cluster where one
# answers (.ci/run starts one), and every notebook of solutions/ (with the learner versions in course/ that run
# otherwise) executed by nbmake on the tiny model, with the run length a GPU learner gets
# (lessons.notebook_run_options: lessons.GPU_MAX_STEPS steps on the CPU too, unless WORKSHOP_MAX_STEPS says
# otherwise), most of it DeepSpeed runs, after set-up (compiling DeepSpeed's ops on a fresh machine).
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# The suite's other DeepSpeed ops now, not inside a test (set-up compiles the core's only): fused Adam, and without a
# GPU the shared-memory collectives of several CPU ranks
_ops=FusedAdamBuilder; nvidia-smi -L >/dev/null 2>&1 || _ops="$_ops ShareMemCommBuilder"
part suite_ops "DeepSpeed's ops for the suite ($_ops): loaded where built, else compiled" python scripts/build_ops.py $_ops
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WORKSHOP_TINY=1 MPLBACKEND=Agg
ruff format --check .  # the tree as the formatter writes it (pyproject.toml's [tool.ruff])
ruff check .
python scripts/make_course.py --check
python scripts/make_timetable.py --check
python scripts/make_figures.py --check  # the docs' and findings' figures, from their runs
# nbmake runs .ipynb files: made here and removed at the end, so JupyterLab keeps listing each notebook once
trap 'rm -f course/[0-9]*.ipynb solutions/[0-9]*.ipynb' EXIT
jupytext -q --to ipynb course/[0-9]*.py solutions/[0-9]*.py
# Two workers (WORKSHOP_TEST_WORKERS): a SLURM test waiting on its job leaves a core to the notebooks;
# tests that share a resource stay in one worker (tests/conftest.py).
# Each worker's torch gets its share of the cores (OMP_NUM_THREADS, unless set): two workers whose OpenMP pools each
# spin a thread per core oversubscribe the machine, and a notebook run ran several times slower so.
workers=${WORKSHOP_TEST_WORKERS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) > workers ? $(nproc) / workers : 1 ))}
# -m "": every tier (pyproject.toml's addopts keep plain `pytest` to the fast one); a test whose experiment cannot run
# here (a DeepSpeed op that cannot be built) is skipped with the reason in the summary (addopts' -rs; CI, where every
# prerequisite is installed, fails on any skip). Time limits guard against hangs only (nbmake's, tests/conftest.py's
# HANG_S): a busy machine makes this longer, never red.
# every solution notebook, and the learner notebooks that run otherwise than their solution (a learner's blank
# answer changes what later cells do, beyond the lessons that take a blank: `make_course.py --diverging`, none now).
# The notebooks first: the workers take the tests in the order given, so the longest (40-140 s each) are shared out
# at the start and the short tests even out the end (last, they left one worker idle while the other ran one).
pytest -q -m "" -p no:cacheprovider --durations=25 -n "$workers" --dist loadgroup solutions/[0-9]*.ipynb \
  $(python scripts/make_course.py --diverging) tests lab/tests --ignore tests/test_executed_notebooks.py \
  --nbmake --nbmake-timeout=3600 --overwrite
# the learner's outputs, kept by --overwrite: no warning, bar or error; 03e's and 04's figures from their runs
# (tests/test_executed_notebooks.py)
pytest -q -p no:cacheprovider tests/test_executed_notebooks.py 2>&1 | sed 's/^/executed notebooks: /'
