#!/usr/bin/env bash
# CI proof of container/: no image registry is reachable here, so the base image is built from Debian's
# packages (mmdebstrap a bookworm root file system with python3, `podman import` it); then the same
# Containerfile the clusters use, `workshop run stage2_offload --tiny` inside the image (results.json
# checked), the image as a SquashFS (what `enroot import` makes for pyxis), and a SLURM job on CI's cluster
# whose ranks run inside that SquashFS (WORKSHOP_CONTAINER_RUNTIME=podman: pyxis is not in Debian).
# Run as root; the check needs .ci/slurm_cluster.sh started (SLURM_CONF set). .ci/run builds in the background
# while the tests run, then checks, each part only when its inputs changed since it passed (its stamps):
#   bash .ci/container.sh build [STATE_DIR]   # base image (kept between runs) and the image
#   bash .ci/container.sh check [STATE_DIR]   # run inside, SquashFS, SLURM job inside it
#   bash .ci/container.sh readme [STATE_DIR]  # the README's set-up and fast tests in the bare base image
#   bash .ci/container.sh [all] [STATE_DIR]   # build and check; STATE_DIR default /tmp/container-ci
set -euo pipefail
cd "$(dirname "$0")/.."
phase=all; case ${1:-} in build|check|readme|all) phase=$1; shift ;; esac
state=${1:-/tmp/container-ci}
mkdir -p "$state"
t0=$SECONDS
step() { echo "container CI: $1 ($((SECONDS - t0)) s)"; }
if [ "$phase" = build ] || [ "$phase" = all ]; then
if ! command -v podman >/dev/null || ! command -v mmdebstrap >/dev/null || ! command -v sqfstar >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap squashfs-tools >/dev/null
fi
pod=(podman --runtime runc)
base=localhost/debian-python:bookworm
if ! podman image exists "$base"; then
  step "building the base image from Debian bookworm"
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-dev,g++,ca-certificates \
    bookworm "$state/rootfs.tar"
  podman import -q "$state/rootfs.tar" "$base" >/dev/null && rm "$state/rootfs.tar"
fi
# This machine's pip reads a local package mirror (pip.conf, /opt/...): the build sees the same.
mirror=()
for p in /etc/pip.conf /etc/xdg/pip "$HOME/.config/pip" /opt/wheels /opt/pypi /opt/pypi-more /etc/ssl/certs; do
  [ -e "$p" ] && mirror+=(-v "$p:${p/#$HOME//root}:ro")
done
step "building container/Containerfile on $base"
podman build -q --network host "${mirror[@]}" -f container/Containerfile --build-arg BASE="$base" \
  --build-arg TORCH_CUDA_ARCH_LIST= -t localhost/workshop:ci . >/dev/null
podman image inspect localhost/workshop:ci --format 'image size: {{.Size}} bytes'
step "image built"
fi
[ "$phase" = build ] && exit 0

if [ "$phase" = readme ]; then
  # The README's set-up and fast tests, word for word, on a new machine: the bare Debian base (python3, venv, g++;
  # nothing installed) and a user without root; pytest must pass, its summary naming anything skipped and why. The project's files as this checkout has them.
  pod=(podman --runtime runc)
  base=localhost/debian-python:bookworm
  podman image exists "$base" || { echo "container CI: no $base; run .ci/container.sh build first"; exit 1; }
  tree=$state/readme && rm -rf "$tree" && mkdir -p "$tree/home/.config" "$tree/workshop"
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tree/workshop"
  [ -d "$HOME/.config/pip" ] && cp -r "$HOME/.config/pip" "$tree/home/.config/"  # this machine's package mirror
  chown -R 1000:1000 "$tree"
  mirror=()
  for p in /etc/pip.conf /etc/xdg/pip /opt/wheels /opt/pypi /opt/pypi-more /etc/ssl/certs; do
    [ -e "$p" ] && mirror+=(-v "$p:$p:ro")
  done
  for v in $(env | grep -o '^PIP_[A-Z_]*'); do mirror+=(-e "$v"); done
  step "the README's set-up and fast tests as a user without root, in $base"
  "${pod[@]}" run --rm --network host --ulimit nofile=1024:4096 --ulimit nproc=4096:8192 "${mirror[@]}" \
    --user 1000:1000 -e HOME=/home/learner -v "$tree/home:/home/learner" -v "$tree/workshop:/home/learner/workshop" \
    -w /home/learner/workshop "$base" \
    bash -c 'set -e; bash scripts/setup.sh && source .venv/bin/activate; SECONDS=0; pytest; echo "fast tier: $SECONDS s"' \
    | tee "$state/readme.log"
  step "done: the README's set-up and fast tests pass without root"
  exit 0
fi

step "workshop run stage2_offload --tiny inside the image"
work=$state/work && rm -rf "$work" && mkdir -p "$work" && cp -r slurm container "$work"/
(cd "$work" && bash container/podman_run.sh localhost/workshop:ci workshop run stage2_offload --tiny --output-dir runs/inside)
python3 - "$work/runs/inside/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["experiment"] == "stage2_offload" and r["global_steps"] > 0 and r["train_loss"] > 0, r
print(f"inside the image: {r['experiment']}, {r['global_steps']} steps, train loss {r['train_loss']:.4f}")
PY

step "the image as a SquashFS"
cid=$(podman create localhost/workshop:ci)
rm -f "$state/workshop.sqsh"
# enroot import's own squashfs options (ENROOT_SQUASH_OPTIONS' default): nothing compressed, fast to write
podman export "$cid" | sqfstar -quiet -noI -noD -noF -noX -no-duplicates "$state/workshop.sqsh"
podman rm -f "$cid" >/dev/null
ls -l "$state/workshop.sqsh"

step "a SLURM job whose ranks run inside the SquashFS"
cd "$work" && mkdir -p logs  # sbatch --output=logs/%x-%j.out: the directory must exist
job=$(WORKSHOP_CONTAINER="$state/workshop.sqsh" WORKSHOP_CONTAINER_RUNTIME=podman WORKSHOP_TINY=1 \
      sbatch --parsable --gpus-per-node=0 slurm/stage2_offload.slurm --max-steps 2)
job=${job%%;*}
# its end, polled each second (sbatch --wait polls at growing intervals, up to 32 s); its exit code as sbatch's
until info=$(scontrol -o show job "$job") && [[ $info =~ JobState=(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) ]]; do
  sleep 1
done
rc=1; [[ $info =~ ExitCode=([0-9]+) ]] && rc=${BASH_REMATCH[1]}
log=logs/stage2_offload-$job.out
if [ "$rc" != 0 ] || [ ! -f "runs/stage2_offload-$job/results.json" ]; then
  echo "container CI: the SLURM job $job (exit $rc) wrote no results.json; its log:"; tail -40 "$log" || true
  exit 1
fi
grep -q "inside container $state/workshop.sqsh (podman)" "$log"
step "done: job $job ran stage2_offload inside the container"
