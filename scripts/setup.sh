# The README's set-up (`bash scripts/setup.sh`), also sourced by scripts/main.sh and scripts/test.sh: create
# .venv (once) and install into it what the work needs. An already active environment (conda, venv) is used as it is.
#   bash scripts/setup.sh               # everything: runs, notebooks, tests
#   WORKSHOP_SETUP=run bash scripts/setup.sh   # what `workshop run` needs, no more (scripts/main.sh)
#   WORKSHOP_SETUP_TIMES=workshop_lessons/reference/setup_times.json bash scripts/setup.sh
#                                       # in a fresh clone: measure each part (the README's timetable states them)
# Before it starts it says what it will install and how long that took in a measured fresh set-up
# (workshop_lessons/reference/setup_times.json); each part is announced with its expected time, and one running
# longer than 30 s says so every 30 s.
# torch: with a GPU the newest CUDA build from PyPI; without, the CPU build of torch 2.13.0 from PyTorch's CPU index
# (WORKSHOP_TORCH_INDEX; empty: pip's configured index), not PyPI's CUDA build of several GB.
# DeepSpeed's ops: only the core's is compiled here, CPU Adam (the main job, ZeRO-2 + CPU offload); the others
# (fused Adam, the CPU's shared-memory collectives of several ranks) compile when a run first needs them, announced
# by that run, into the same cache (`workshop_lib.env`), once. (Just in time, as runs would: DeepSpeed's install-time
# build, DS_BUILD_CPU_ADAM=1, compiles one file at a time and took about twice as long on 2 cores.)
_setup_mode=${WORKSHOP_SETUP:-full}
quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }  # drop pip's notes about unused local indexes
# expected NAME: the seconds part NAME took in the measured fresh set-up, 0 if not measured
_times=workshop_lessons/reference/setup_times.json
expected() { python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["seconds"].get(sys.argv[2], 0)))' \
  "$_times" "$1" 2>/dev/null || echo 0; }
_measured=()
# part NAME WHAT CMD...: CMD announced with its expected time, a line every 30 s while it runs, its time at the end
part() {
  local name=$1 what=$2 t0=$SECONDS e rc=0 tick=30; shift 2; e=$(expected "$name")
  echo "$what$([ "$e" = 0 ] || echo " (about $e s in the measured set-up)") ..."
  "$@" & local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; [ $((SECONDS - t0)) -lt $tick ] || { echo "  ... $((SECONDS - t0)) s so far"; tick=$((tick + 30)); }
  done
  wait "$pid" || rc=$?
  echo "  done in $((SECONDS - t0)) s"; _measured+=("$name=$((SECONDS - t0))")
  return $rc
}
# before anything starts: how long the parts to come took in the measured fresh set-up
announce() {
  local t=0 p; for p; do t=$((t + $(expected "$p"))); done
  [ $t = 0 ] && echo "Set-up: $* (no measured times: $_times is missing)" && return
  echo "Set-up: about $(( (t + 59) / 60 )) min ($*), as long as the measured fresh set-up took on a" \
    "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["machine"])' "$_times") ($_times)"
}
if [ -z "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]; then
  if [ ! -x .venv/bin/python ]; then  # a newer pip: Debian's 23.0 builds DeepSpeed the legacy way
    announce venv torch workshop CPUAdamBuilder
    part venv "Creating the virtual environment .venv" \
      bash -c 'python3 -m venv .venv && .venv/bin/python -m pip install -q --upgrade pip' 2> >(grep -v "^WARNING: Loc" >&2)
  fi
  source .venv/bin/activate
fi
_gpu=0; if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then _gpu=1; fi
_torch=0; python -c "import torch" 2>/dev/null && _torch=1
# installed, not merely importable from this folder: the package's metadata and what it needs
# (their metadata, not an import: importing DeepSpeed here would print its accelerator warning on a CPU)
_check="deepspeed-workshop deepspeed transformers datasets"
if [ "$_setup_mode" != run ]; then _extras="[test]"; _check="$_check pytest nbmake pytest-xdist jupytext playwright"; fi
_pkgs=0; python -c "import importlib.metadata as m, sys; [m.version(n) for n in sys.argv[1:]]" $_check 2>/dev/null && _pkgs=1
if [ ${#_measured[@]} = 0 ] && { [ $_torch = 0 ] || [ $_pkgs = 0 ]; }; then  # an environment without them yet
  announce $([ $_torch = 1 ] || echo torch) $([ $_pkgs = 1 ] || echo workshop) CPUAdamBuilder
fi
if [ $_torch = 0 ]; then
  if [ $_gpu = 1 ]; then
    part torch "Installing torch with CUDA (a download of several GB)" quiet pip install -q torch
  else  # torch alone from the CPU index, then what it needs from pip's own
    _cpu_torch() { quiet pip install -q --no-deps torch==2.13.0 ${1:+--index-url "$1"} && quiet pip install -q torch==2.13.0; }
    part torch "Installing torch 2.13.0, CPU build (no GPU here)" \
      _cpu_torch "${WORKSHOP_TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
  fi
fi
if [ $_pkgs = 0 ]; then
  # (setuptools's box about editable installs and same-named folders: this folder is the package's own)
  _what="deepspeed, transformers, datasets, accelerate${_extras:+, jupyterlab, pytest, ...}"
  part workshop "Installing the workshop and what it needs ($_what)" \
    quiet env PYTHONWARNINGS="ignore:Editable installation" pip install -q -e ".${_extras:-}"
fi
if [ "$_setup_mode" != run ]; then  # the course's Jupyter server extension (workshop_lessons/jupyter.py):
  # pyproject's data-files reach an environment through a wheel's install, not an editable one
  _cfg=$(python -c 'import sys; print(sys.prefix)')/etc/jupyter/jupyter_server_config.d
  mkdir -p "$_cfg" && cp workshop_lessons/jupyter_config/workshop_course.json "$_cfg/"
fi
# The core's DeepSpeed op, CPU Adam, compiled now unless this environment has it (then loaded in seconds)
part CPUAdamBuilder "DeepSpeed's CPU Adam op: loaded where this environment has it, else compiled" \
  python scripts/build_ops.py CPUAdamBuilder
if [ -n "${WORKSHOP_SETUP_TIMES:-}" ]; then
  python3 - "$WORKSHOP_SETUP_TIMES" "${_measured[@]}" <<'PY'
import json, os, platform, sys, torch
seconds = dict(kv.split("=") for kv in sys.argv[2:])
cpu = f"CPU ({platform.machine()}, {len(os.sched_getaffinity(0))} cores)"
device = torch.cuda.get_device_name() if torch.cuda.is_available() else cpu
json.dump({"machine": device, "seconds": {k: int(v) for k, v in seconds.items()},
           "load_average_15min": round(os.getloadavg()[2], 1),  # what else ran: a busy machine's parts take longer
           "measured by": "WORKSHOP_SETUP_TIMES=FILE bash scripts/setup.sh, in a fresh clone without .venv"},
          open(sys.argv[1], "w"), indent=1)
print("Set-up times written to", sys.argv[1])
PY
fi
unset _setup_mode _extras _check _gpu _torch _pkgs _cfg _what  # _times, _measured: part() and expected() use them later
