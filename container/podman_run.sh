#!/usr/bin/env bash
# Run a command inside the workshop image with Podman on this node, as slurm/common.sh does for
# WORKSHOP_CONTAINER_RUNTIME=podman (and CI does, where no pyxis is installed):
#   bash container/podman_run.sh IMAGE COMMAND...        # IMAGE: a podman image name, or a .sqsh file
# Host network and IPC (torchrun's rendezvous, NCCL/gloo shared memory), this directory and HF_HOME mounted
# at the same paths, and the job's variables (ranks, rendezvous, WORKSHOP_*, HF_*) passed in. A .sqsh image
# is mounted read-only and used as the root file system under a throw-away overlay.
# runc, not crun, and explicit ulimits: crun fails on hosts with cgroups v1 and a capped RLIMIT_NOFILE.
set -euo pipefail
image=$1; shift
args=(--runtime "${WORKSHOP_PODMAN_RUNTIME:-runc}" run --rm --network host --ipc host
      --ulimit nofile=1024:4096 --ulimit nproc=1024:4096 -v "$PWD:$PWD" -w "$PWD")
[ -n "${HF_HOME:-}" ] && [ -d "$HF_HOME" ] && args+=(-v "$HF_HOME:$HF_HOME")
while IFS='=' read -r k _; do
  case $k in SLURM_*|WORKSHOP_*|MASTER_*|HF_*|TORCH_*|NCCL_*|OMP_*|RANK|WORLD_SIZE|LOCAL_RANK) args+=(-e "$k") ;; esac
done < <(env)
if [[ $image == *.sqsh ]]; then
  mnt=$(mktemp -d)
  mount -t squashfs -o ro "$image" "$mnt" || { echo "podman_run: cannot mount $image (squashfs)." >&2
    echo "To fix: run as root with the squashfs kernel module, or give the image by name (podman images)." >&2; exit 2; }
  trap 'umount "$mnt"; rmdir "$mnt"' EXIT
  [ -f "$mnt/etc/environment" ] && args+=(--env-file "$mnt/etc/environment")  # the image's ENV (Containerfile)
  podman "${args[@]}" --rootfs "$mnt:O" "$@"
else
  podman "${args[@]}" "$image" "$@"
fi
