# Sourced by every lab/scripts/device_*.sh: installs the carried wheels (.whl/: deepspeed, datasets and their needs,
# into a folder named site-packages: NOTES) and sets the device call's environment (TORCH_CUDA_ARCH_LIST=9.0: the
# image's 9.0a breaks DeepSpeed's op builder; no hub).
set -o pipefail
# Once per machine: reinstalling the same wheels on a warm machine (a second script of one call, or the next call)
# makes torch rebuild DeepSpeed's ops silently, about 100 s (seen 2026-11-29: "ops: 102 s" and 83 s with nothing new)
# `install_once TARGET WHEEL...`: the wheels into TARGET unless the same ones (by checksum) are there already
install_once() {
  local target=$1; shift
  cksum "$@" | cmp -s - "$target/.carried" 2>/dev/null && return
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" "$@" \
    && cksum "$@" >"$target/.carried"
}
install_once /tmp/site-packages .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site-packages:$PWD TORCH_CUDA_ARCH_LIST=9.0 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export PYTHONUNBUFFERED=1
nvidia-smi -L
