#!/usr/bin/env bash
# The package installed as a user or a cluster installs it, run from a learner's folder outside the checkout:
#  1. a non-editable `pip install .` into a new venv runs notebooks 02 and 04: 02's GPU reference runs beside the
#     learner's figures (the package data reaches an install), 04's two-node SLURM job submitted from that folder's
#     slurm/ and read back (the engine uses the caller's folder, never its own location);
#  2. `pip install --target TREE` (a cluster's module tree: a folder not named site-packages, found through
#     PYTHONPATH, its `workshop` command in TREE/bin) runs a tiny `workshop run` and notebook 02.
# 1's notebook 02 and 2 run side by side, each in its own learner's folder, each process on one thread
# (OMP_NUM_THREADS=1): each is one process at a time (a kernel, a tiny run), and one after the other they left one of
# the two cores idle (the whole check took 228 s and 209 s of CPU so). Then 04 alone: its two ranks take both cores.
# A new venv sees the active environment's packages (a .pth file: nothing is downloaded again) and holds its own
# copy of the workshop (not a link to this folder); the tree holds the workshop alone, the rest comes from the
# active environment.
#   bash .ci/non_editable.sh [VENV_DIR]     # with the set-up's environment active (source .venv/bin/activate)
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
venv=${1:-/tmp/non-editable-ci}
rm -rf "$venv" && python -m venv --without-pip "$venv"
site() { "$1" -c "import site; print(site.getsitepackages()[0])"; }
site python > "$(site "$venv/bin/python")/outer.pth"
# the same torch as the outer environment: its compiled DeepSpeed ops serve (workshop_lib.env's per-environment cache)
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$(python -c "import os, workshop_lib.env; print(os.environ['TORCH_EXTENSIONS_DIR'])" 2>/dev/null)}
src=$(mktemp -d) && git ls-files -z | xargs -0 cp --parents -t "$src"  # built there: no build/ left here
"$venv/bin/python" -m pip install -q --no-deps --no-build-isolation "$src" 2> >(grep -v "^WARNING: Location" >&2)
tree=$venv-modules/workshop/0.1  # as a site's module tree names it (not site-packages)
rm -rf "$tree" && pip install -q --no-deps --no-build-isolation --target "$tree" "$src" 2> >(grep -v "^WARNING: Location" >&2)
echo "installed (pip install ., pip install --target): $((SECONDS - t0)) s"
# `learner`: a new learner's folder outside the checkout (its course/, printed): the batch scripts (slurm/) beside the
# course's notebooks, nothing else
learner() {
  local w; w=$(mktemp -d) && mkdir "$w/course" && cp -r slurm "$w/"
  cp course/02_zero_stages.py course/04_multi_gpu.py "$w/course/" && echo "$w/course"
}
work1=$(learner) work2=$(learner)
# Both at 4 steps a run (the suite runs them at length; here what is checked is where things are found): 02's
# reference from the package data; 04's two-rank run, where a SLURM cluster answers (CI starts one), a two-node job
# submitted from this folder and read back by the installed package, which has no slurm/ of its own
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WORKSHOP_TINY=1 MPLBACKEND=Agg OMP_NUM_THREADS=1
check=$(cat <<'PY'
import json, os, shutil, subprocess, sys
import jupytext, nbclient
import workshop_lessons, workshop_lib

root, notebooks = sys.argv[1], sys.argv[2:]  # the install's folder; the notebooks to run
for m in (workshop_lib, workshop_lessons):
    assert m.__file__.startswith(root), f"{m.__name__} imported from {m.__file__}, not the install in {root}"
assert not (__import__("pathlib").Path(workshop_lib.__file__).parents[1] / "slurm").exists()


def run(name, **env):
    nb = jupytext.read(f"{name}.py")
    os.environ.update(env)
    try:
        nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": os.getcwd()}}).execute()
    finally:
        for k in env:
            del os.environ[k]
    # what a learner would see as red boxes: any warning a library printed to the cell's stderr
    red = [line for c in nb.cells for o in c.get("outputs", []) if o.get("name") == "stderr"
           for line in o.get("text", "").splitlines() if "warn" in line.lower()]
    assert not red, f"warnings in {name}'s executed outputs:\n" + "\n".join(red[:20])
    return json.dumps([o for c in nb.cells for o in c.get("outputs", [])])


from workshop_lessons.references import reference

if "02" in notebooks:
    outputs = run("02_zero_stages", WORKSHOP_MAX_STEPS="4")
    device = reference("02_zero_stages")["device"].iloc[0]  # read from the install's package data
    assert f"Reference: {device}" in outputs, f"no {device} reference beside the learner's figures"
    print(f"install in {root}: notebook 02 ran in {os.getcwd()}, the {device} reference beside the learner's figures")
if "04" not in notebooks:
    sys.exit()
slurm = shutil.which("sbatch") and subprocess.run(["sinfo"], capture_output=True).returncode == 0
if os.environ.get("WORKSHOP_REQUIRE_SLURM") == "1":
    assert slurm, "WORKSHOP_REQUIRE_SLURM=1 but no SLURM cluster answers (bash .ci/slurm_cluster.sh start)"
outputs = run("04_multi_gpu", WORKSHOP_MAX_STEPS="4")
if slurm:
    assert "stage2 on 2 nodes: SLURM job" in outputs, "notebook 04's two-node job did not run:\n" + "\n".join(
        line for line in outputs.split("\\n") if "two-node job" in line or "SLURM" in line
    )
    job = outputs.split("stage2 on 2 nodes: SLURM job ")[1].split(",")[0]
    log = open(f"../logs/multi_node-{job}.out").read()
    installed = os.path.dirname(workshop_lib.__file__)  # the job's ranks read the bundled data from the install
    assert f"({installed}/squad/" in log, f"the job's ranks did not run the new install ({installed}):\n{log[-2000:]}"
    print(f"notebook 04 ran in {os.getcwd()}: its two-node job {job} was submitted from {os.path.dirname(os.getcwd())}"
          " (its slurm/, its logs/) and read back")
else:
    print(f"notebook 04 ran in {os.getcwd()}; no SLURM cluster here, its ranks ran on this machine")
PY
)
venv_check() {  # the new venv active, as a learner has it (an active environment is what a batch job uses)
  cd "$work1" && VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH timeout 2400 "$venv/bin/python" -c "$check" "$venv" "$@"
}
# 2. the module tree, the active environment's Python, nothing else of this checkout on its path
tree_check() {
  cd "$work2" || return
  PYTHONPATH=$tree PATH=$tree/bin:$PATH timeout 600 workshop run stage2 --tiny --max-steps 2 --save-strategy no \
    --no-save-model --output-dir ../runs/target > ../target-run.log 2>&1 || { cat ../target-run.log; return 1; }
  python -c 'import json; r = json.load(open("../runs/target/results.json")); assert r["train_loss"] > 0, r'
  grep -q "($tree/workshop_lib/squad/" ../target-run.log || { cat ../target-run.log; echo "not the tree's data"; return 1; }
  PYTHONPATH=$tree timeout 1200 python -c "$check" "$tree" 02
}
# Side by side where each is one process at a time (a kernel, a tiny run): 02 from the new venv, 2. from the tree;
# then 04 alone, whose two ranks take both cores (all three side by side took 260 s and 388 s of CPU: ranks that
# wait for a core spin)
t0=$SECONDS
venv_check 02 > "$work1/../part.log" 2>&1 & p1=$!
tree_check > "$work2/../part.log" 2>&1 & p2=$!
rc1=0 rc2=0; wait $p1 || rc1=$?; wait $p2 || rc2=$?
cat "$work1/../part.log" "$work2/../part.log"
echo "side by side: notebook 02 of the new venv (rc $rc1), the tree's tiny run and notebook 02 (rc $rc2): $((SECONDS - t0)) s"
# (an && list whose first test fails does not stop a `set -e` script: say it)
[ $rc1 = 0 ] && [ $rc2 = 0 ] || exit 1
t0=$SECONDS
venv_check 04
echo "notebook 04 of the new venv: $((SECONDS - t0)) s"
