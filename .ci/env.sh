# .ci/run's environment, sourced after .ci/lib.sh: created once per KEY under CI_CACHE_DIR (~/.cache/workshop-ci)
# and kept across CI runs in fresh clones, with DeepSpeed's compiled ops (TORCH_EXTENSIONS_DIR) beside it. KEY
# hashes the Python and compiler versions, scripts/setup.sh and pyproject.toml's requirements: what decides the
# installed torch and DeepSpeed and how the ops compile. A new KEY (a set-up change) starts from nothing, so that
# run proves the cold build; any other run reinstalls only this clone's package (editable, --no-deps) and finds
# every op built. A set-up interrupted midway is finished by the next run (setup.sh installs what is missing).
#   source .ci/lib.sh && source .ci/env.sh
cache=${CI_CACHE_DIR:-$HOME/.cache/workshop-ci}
mkdir -p "$cache"
# one CI at a time uses it (flock, held until the run ends)
cc_version=$("${CC:-cc}" --version 2>/dev/null | head -1 || echo "no compiler")
key=$({
  python3 --version; echo "$cc_version"; cat scripts/setup.sh
  python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print(p["build-system"], p["project"]["dependencies"], p["project"]["optional-dependencies"])'
} | sha256sum | cut -c1-16)
env_dir=$cache/env-$key
exec 9> "$cache/env-$key.lock" && flock 9
if [ -x "$env_dir/bin/python" ]; then
  echo "CI: the kept environment $env_dir (key $key), with its compiled ops"
else
  echo "CI: a new environment $env_dir (key $key: first run, or the set-up changed): installs and builds every op"
  python3 -m venv "$env_dir"
  "$env_dir/bin/python" -m pip install -q --upgrade pip 2> >(grep -v "^WARNING: Location" >&2)
fi
source "$env_dir/bin/activate"
export TORCH_EXTENSIONS_DIR=$env_dir/torch_extensions
# a lock left by a build killed in an earlier run (no build runs now: this run holds the environment's lock)
find "$TORCH_EXTENSIONS_DIR" -maxdepth 3 -name lock -delete 2>/dev/null || true
# this clone's package, not the one an earlier clone installed (its dependencies are in the environment)
if python -c "import importlib.metadata as m; m.version('deepspeed-workshop')" 2>/dev/null; then
  PYTHONWARNINGS="ignore:Editable installation" pip install -q --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
fi
within bash -c 'source scripts/setup.sh'
python - "$cc_version" <<'PY'
import importlib.metadata as m, sys
print("CI: environment: torch", m.version("torch"), "DeepSpeed", m.version("deepspeed"), "compiler:", sys.argv[1])
PY
# environments of other keys unused for two weeks go (this one's date says it is in use)
touch "$env_dir"
find "$cache" -maxdepth 1 -name 'env-*' -type d ! -name "env-$key" -mtime +14 -exec rm -rf {} + 2>/dev/null || true
