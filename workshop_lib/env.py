"""The machine: hub reachability, device, precision, versions, and one-process distributed setup
(introduced in `00_setup`)."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import hashlib
import importlib.metadata as md
import io
import logging
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from functools import lru_cache
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from packaging.version import Version
from torch.utils.cpp_extension import _get_build_directory
from transformers.utils import is_flash_attn_2_available
from transformers.utils import logging as hf_logging

from . import gpus, variables
from .errors import WorkshopError
from .units import MiB

# DeepSpeed's accelerator (its documented DS_ACCELERATOR) pinned without a GPU: detecting it warns in every process
if "DS_ACCELERATOR" not in os.environ and not torch.cuda.is_available():
    os.environ["DS_ACCELERATOR"] = "cpu"
# DeepSpeed's JIT-built ops, one cache per environment: two environments with the same torch on one machine would
# share ~/.cache/torch_extensions/pyXY_cu and rebuild each other's ops at every switch. A value already set wins.
if "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = str(
        Path.home()
        / ".cache"
        / "torch_extensions"
        / (
            f"{Path(sys.prefix).parent.name}-{Path(sys.prefix).name.lstrip('.')}-"
            f"{hashlib.sha1(sys.prefix.encode()).hexdigest()[:8]}"
        )
    )


def threads_per_rank(local_ranks: int = 1) -> int:
    """CPU threads for each of `local_ranks` processes on this node: OMP_NUM_THREADS where the user set it, else the
    cores this process may run on (its affinity, `os.sched_getaffinity`: a SLURM job's or a container's share, not
    the machine's `os.cpu_count`) divided among them, at least 1. More threads than cores slow every rank down."""
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return int(os.environ["OMP_NUM_THREADS"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // local_ranks)


# A CPU run's threads: its share of the cores it gets (torch's default gives every process all of them, whatever
# the ranks beside it), unless the user set OMP_NUM_THREADS; set in torch, not exported: a launch from here
# (`launch.run_local`, a batch job) gives its ranks their own.
if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
    torch.set_num_threads(threads_per_rank(int(os.environ.get("LOCAL_WORLD_SIZE", 1))))


@lru_cache(maxsize=1)
def device_name() -> str:
    """'NVIDIA H100 80GB HBM3' (the GPU of this rank), or 'cpu (<processor>, N cores)'."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def pick_precision(preferred: str) -> str:
    """The precision a run uses on this machine: `preferred` ("bf16", "fp16" or "fp32", the recipe's or
    --precision) on a GPU, fp16 where bf16 is asked for and the GPU lacks it (before Ampere), fp32 on the CPU
    (DeepSpeed's CPU path and the tiny model)."""
    if not torch.cuda.is_available():
        return "fp32"
    if preferred == "bf16" and not torch.cuda.is_bf16_supported():
        print("This GPU has no bf16 (needs Ampere or newer): training in fp16 with loss scaling instead.")
        return "fp16"
    return preferred


def pick_attention(requested: str, precision: str) -> str | None:
    """The attn_implementation to build the model with: None for "default" (the model's own: sdpa where supported, BLOOM
    eager), or `requested`; flash_attention_2 only where installed, on a GPU, in 16-bit (else the model's own)."""
    if requested == "default":
        return None
    if requested == "flash_attention_2" and not (
        torch.cuda.is_available() and precision in ("bf16", "fp16") and is_flash_attn_2_available()
    ):
        return None
    return requested


def peak_flops() -> float | None:
    """Dense 16-bit peak FLOP/s of this GPU (`gpus.peak_flops`), or None on the CPU or an unknown GPU (MFU is then
    null rather than a guess)."""
    return gpus.peak_flops(torch.cuda.get_device_name()) if torch.cuda.is_available() else None


def versions() -> dict:
    """Versions of python, torch, transformers, deepspeed, datasets, accelerate (None where missing)."""
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for pkg in ("transformers", "deepspeed", "datasets", "accelerate"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def ensure_distributed_env() -> None:
    """Make a plain process (a notebook kernel, `workshop run` without a launcher) a world of one.

    DeepSpeed otherwise tries MPI discovery and fails with "No module named 'mpi4py'". Under a launcher
    (torchrun, deepspeed, srun) RANK and WORLD_SIZE are already set and nothing changes. In a world of one,
    DeepSpeed's shared-memory collectives are not compiled (`skip_unused_deepspeed_ops`)."""
    if not ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        os.environ.update(
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            # DeepSpeed needs one set; nothing listens on it: the group starts on an in-process store (init_distributed)
            MASTER_PORT=os.environ.get("MASTER_PORT") or "29500",
        )
    skip_unused_deepspeed_ops(int(os.environ["WORLD_SIZE"]))


def one_gpu_per_process(args):
    """`args` (a `transformers.TrainingArguments`) with `n_gpu` 1, returned. In a process that sees several GPUs and
    that no launcher made one rank of several (a notebook kernel on a machine of 2 GPUs), the HF Trainer takes all
    of them (`n_gpu` = the visible GPUs) and wraps the model in `torch.nn.DataParallel`, which the course does not
    teach and whose replicas of the workshop's model fail ("Expected all tensors to be on the same device"). Every
    workshop run uses one GPU per process, as the Trainer itself forces for model parallelism (`Trainer.__init__`)."""
    if args.n_gpu > 1:
        args._n_gpu = 1
    return args


def sanitize_cuda_arch_list() -> None:
    """Drop the arch suffix DeepSpeed's op builder cannot parse: TORCH_CUDA_ARCH_LIST="9.0a" -> "9.0".

    Hopper images and clusters set "9.0a" (or "8.0;9.0a;10.0a"); DeepSpeed's JIT build of fused_adam and
    cpu_adam then fails with `ValueError: invalid literal for int() with base 10: '0a'`."""
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if archs:
        clean = ";".join(a.rstrip("af") for a in archs.replace(" ", ";").split(";") if a)
        if clean != archs:
            print(f"TORCH_CUDA_ARCH_LIST {archs!r} -> {clean!r} (DeepSpeed's op builder needs plain numbers)")
            os.environ["TORCH_CUDA_ARCH_LIST"] = clean


def init_distributed() -> None:
    """Start the process group now, so ranks can wait for each other before the Trainer exists (rank 0 prepares
    the output directory while the others wait). The Trainer and DeepSpeed find it started and use it.

    Under a launcher with WORLD_SIZE > 1: NCCL on GPUs, gloo on the CPU, rendezvous at MASTER_ADDR:MASTER_PORT
    (torchrun's own store, which torch binds on every interface: `TCPStore` has no bind address).
    A world of one made by `ensure_distributed_env` (a DeepSpeed run without a launcher): the group's store is
    in-process (`HashStore`), so nothing listens on MASTER_PORT, and gloo and NCCL are held to the loopback
    interface (`loopback_interface`) unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME say otherwise: a one-process
    run listens on no port reachable from the network. Without RANK (no DeepSpeed, no launcher): nothing.
    Collectives time out after WORKSHOP_DIST_TIMEOUT_S seconds (default 1800): a dead rank fails the job."""
    if dist.is_initialized() or (world()[2] == 1 and "RANK" not in os.environ):
        return
    timeout = datetime.timedelta(seconds=dist_timeout_s())
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if world()[2] > 1:
        dist.init_process_group(backend, timeout=timeout)
        return
    # Set for the start only (NCCL started now, not at its first collective, so it reads them now): left in
    # os.environ they would reach a batch job submitted from this process and hold its nodes to loopback.
    lo = loopback_interface()
    held = {v: lo for v in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if lo and v not in os.environ}
    device = {"device_id": torch.device("cuda", world()[1])} if backend == "nccl" else {}
    os.environ.update(held)
    try:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, **device)
    finally:
        for v in held:
            os.environ.pop(v, None)
    # ended at exit, as it outlives each run of a kernel: no "destroy_process_group() was not called" warning
    atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())


def loopback_interface() -> str | None:
    """The name of the network interface that holds 127.0.0.1 ("lo" on Linux, "lo0" on macOS; psutil), or
    None when none does."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return None


def gather(obj) -> list:
    """`obj` of every rank, in rank order (all_gather_object: a collective); [obj] in a world of one."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [obj]
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, obj)
    return every


def barrier() -> None:
    """Wait for every rank (nothing in a world of one)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


# The DeepSpeed this workshop was tested with: pyproject.toml's floor. Earlier releases back to 0.17.6 have known ZeRO
# defects a workshop run can hit (wrong ZeRO-2 gradients, dropped bf16 gradients on several ranks, a 2.5x slower
# ZeRO-2, NaN under torch.compile): docs/deepspeed_versions.md names each with its issue and range.
DEEPSPEED_FLOOR = "0.19.8"


def check_deepspeed_version(version: str) -> None:
    """Refuse a DeepSpeed below `DEEPSPEED_FLOOR` ("0.18.2", "0.19.8+cu130": compared as `packaging.version.Version`s, a
    local tag is its release, a pre-release comes before it), before anything is written.

    Raises:
        WorkshopError: the installed version, why, and the fix."""
    if Version(version) < Version(DEEPSPEED_FLOOR):
        raise WorkshopError(
            f"DeepSpeed {version} is installed, older than {DEEPSPEED_FLOOR}, the release this workshop "
            "is tested with; earlier releases have known ZeRO defects (wrong ZeRO-2 gradients, NaN "
            "under torch.compile: docs/deepspeed_versions.md).",
            f"pip install -U 'deepspeed>={DEEPSPEED_FLOOR}'.",
        )


def deepspeed_ops(offload_optimizer: str, world_size: int = 1) -> list[str]:
    """The DeepSpeed op builders a run JIT-compiles on this machine: the optimizer (CPU Adam with offload,
    fused Adam otherwise) and, for several ranks on the CPU, the shared-memory collectives (one process has no one
    to talk to: `skip_unused_deepspeed_ops`)."""
    ops = ["FusedAdamBuilder" if offload_optimizer == "none" else "CPUAdamBuilder"]
    return ops + ([] if torch.cuda.is_available() or world_size == 1 else ["ShareMemCommBuilder"])


# What DeepSpeed's op probes print when an op's library is missing: it probes every op, and the test program for
# async_io (NVMe offload, which the workshop does not use) links with -laio (`OpBuilder.has_function`); without
# libaio the linker says so on the process's stderr.
LINK_PROBE_NOISE = re.compile(
    r"^(/usr/bin/)?ld(\.\w+)?: cannot find -l\w+|^collect2: error: ld returned \d+ exit status"
)


@contextlib.contextmanager
def quiet_stderr(noise: re.Pattern = LINK_PROBE_NOISE):
    """Hold back the stderr lines matching `noise`: by default what DeepSpeed's op-compatibility probes print (with
    libaio missing, the async_io probe's `/usr/bin/ld: cannot find -laio` and `collect2: error: ld returned 1 exit
    status`, read as a failure while the op is simply reported not compatible). DeepSpeed silences its probe by
    redirecting sys.stderr's file descriptor, which under Jupyter is not the descriptor 2 the linker writes to, or has
    none (ipykernel without its descriptors captured, as under nbmake: the probe then fails and reports the op not
    compatible even with libaio). Here descriptor 2 goes to a file while the block runs, and sys.stderr writes to it;
    every other line is written back to stderr afterwards: real errors still show."""
    sys.stderr.flush()
    saved, stream = os.dup(2), sys.stderr
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        try:
            yield
        finally:
            sys.stderr.flush()
            sys.stderr = stream
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [
                line
                for line in held.read().decode(errors="replace").splitlines(keepends=True)
                if not noise.search(line)
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def compatible_deepspeed_ops() -> dict[str, bool]:
    """DeepSpeed's op name -> whether it can be built here (`deepspeed.ops.__compatible_ops__`, probed once per
    process on first use: every op's builder compiles or links a test where it needs a library), probed
    without the linker's noise (`quiet_stderr`). {} without DeepSpeed."""
    try:  # optional; here, inside quiet_stderr's reach: importing it probes the ops (and picks the accelerator)
        import deepspeed.ops
    except ImportError:
        return {}
    with quiet_stderr():
        compatible = getattr(deepspeed.ops, "__compatible_ops__", None)
    return compatible if isinstance(compatible, dict) else {}


def skip_unused_deepspeed_ops(world_size: int) -> None:
    """In a world of one, stop DeepSpeed from compiling its shared-memory collectives (`deepspeed_shm_comm`,
    CPU accelerator only), which its communication backend builds at start-up whatever the world size
    (deepspeed/comm/torch.py, `build_shm_op`, gated on `deepspeed.ops.__compatible_ops__`): about two minutes
    of compilation on a 2-core machine that one process never uses. Several ranks keep it. On every machine
    the ops are probed here first, without the linker's noise (`compatible_deepspeed_ops`)."""
    compatible = compatible_deepspeed_ops()  # probed here, quietly, before DeepSpeed's own start-up asks
    if compatible and world_size == 1 and not torch.cuda.is_available():
        compatible["deepspeed_shm_comm"] = False


def ds_report() -> list[str]:
    """The lines of `ds_report` (DeepSpeed's environment report: each op, compatible and installed or not,
    torch, CUDA and DeepSpeed versions, the accelerator), run in a subprocess, its colour codes removed (it
    colours [OKAY], [NO] and [WARNING] whatever the output is)."""
    out = subprocess.run([sys.executable, "-m", "deepspeed.env_report"], capture_output=True, text=True).stdout
    return re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines()


def _builders(names: list[str]):
    # DeepSpeed here, not at the top: importing it picks the accelerator (pinned above) and probes its ops
    from deepspeed.accelerator import get_accelerator

    return [b for b in map(get_accelerator().create_op_builder, names) if b is not None]


def check_deepspeed_ops(names: list[str]) -> None:
    """Stop, with the fix, when one of the named DeepSpeed ops cannot be built here (a quick check).

    Raises:
        WorkshopError: the op's requirements are missing (a compiler, ninja, the CUDA toolkit)."""
    for builder in _builders(names):
        with quiet_stderr():
            compatible = builder.is_compatible(verbose=False)
        if not compatible:
            raise WorkshopError(
                f"DeepSpeed's {builder.name} op cannot be built on this machine (see `ds_report`).",
                "install a C++ compiler, ninja and, on a GPU, the CUDA toolkit matching torch "
                "(conda install gxx_linux-64 ninja cuda-nvcc), or run the baseline experiment.",
            )


def build_deepspeed_ops(names: list[str]) -> None:
    """Build (once per machine and torch version, cached in the torch extensions folder) or load each named DeepSpeed op
    now, saying so and how long it took when there is no build yet, rather than minutes of silence inside the first
    step; a cached op loads silently (so does the rebuild torch makes of a cache another torch or compiler wrote).

    Raises:
        WorkshopError: a lock left by a killed build blocks it (see `wait_for_file_lock`;
            WORKSHOP_OP_LOCK_TIMEOUT_S seconds, default 600)."""
    for builder in _builders(names):
        build_dir = Path(_get_build_directory(builder.name, verbose=False))
        wait_for_file_lock(
            build_dir / "lock",
            f"DeepSpeed's {builder.name} op",
            timeout_s=variables.get("WORKSHOP_OP_LOCK_TIMEOUT_S", 600.0),
        )
        first = not any(build_dir.glob("*.so"))
        if first:
            print(f"Compiling DeepSpeed's {builder.name} op (once per machine and torch; minutes) ...", flush=True)
        t0 = time.perf_counter()
        # DeepSpeed's own lines silenced; quiet_stderr: load() probes again (DeepSpeed's later load() finds it loaded)
        with contextlib.redirect_stdout(io.StringIO()), quiet_stderr():
            builder.load(verbose=False)
        if first:
            print(f"  compiled in {time.perf_counter() - t0:.0f} s, cached in {build_dir} for later runs.", flush=True)


def wait_for_file_lock(
    lock: str | os.PathLike, what: str, timeout_s: float = 600, notice_after_s: float = 10, poll_s: float = 1.0
) -> None:
    """Wait while `lock` (torch's JIT-build lock for a DeepSpeed op) exists and a process builds in its folder
    (torch runs ninja and the compilers there), saying so after `notice_after_s` seconds. torch's lock records no
    owner: a build killed midway leaves it, and every later build of that op would wait on it, silently.

    Raises:
        WorkshopError: the lock is stale (no process of this user has built in its folder for `notice_after_s`
            seconds), or still there after `timeout_s` seconds; the fix removes it."""
    lock = Path(lock)
    t0 = seen = time.monotonic()
    told, fix = False, f"if no build is running (`pgrep -af ninja` shows none), remove it: rm {lock}"
    while lock.exists():
        now = time.monotonic()
        seen = now if building_in(lock.parent) else seen
        if now - seen > notice_after_s:
            raise WorkshopError(
                f"{lock} blocks the build of {what}, and no process is building there: a build "
                "killed midway left this lock behind.",
                fix,
            )
        if now - t0 > notice_after_s and not told:
            print(
                f"Waiting for {lock}: another process is building {what}. Giving up after {timeout_s:.0f} s.",
                flush=True,
            )
            told = True
        if now - t0 > timeout_s:
            raise WorkshopError(f"{lock} has blocked the build of {what} for {now - t0:.0f} s.", fix)
        time.sleep(poll_s)


def building_in(folder: Path) -> bool:
    """Whether a process of this user works in `folder` (its current directory)."""
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if Path(p.cwd()) == folder:
                return True
    return False


@lru_cache(maxsize=1)
def quiet_libraries() -> None:
    """Silence, once per process, the library messages that tell a learner nothing about the run: PyTorch's
    FutureWarnings on the collectives DeepSpeed calls (one per call site, hundreds under ZeRO-3), its barrier() device
    notice, accelerate's OMP_NUM_THREADS notice, accelerate's "Gradient accumulation steps mismatch" (the Trainer hands
    DeepSpeed its own accumulation on purpose), transformers' "Writing model shards" and "Loading weights" bars (shown at 0% in a
    notebook's output), its "process group is initialized, but parallel_mode != DISTRIBUTED" for a world of one; a
    resume's expected notes are `checkpoint.quiet_resume_notes`'. Everything else, errors included, still shows."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
    warnings.filterwarnings("ignore", message=r"OMP_NUM_THREADS/MKL_NUM_THREADS unset", category=UserWarning)
    warnings.filterwarnings(
        "ignore", message=r"barrier\(\): using the device under current context", category=UserWarning
    )
    logging.getLogger("accelerate.accelerator").addFilter(
        lambda r: "Gradient accumulation steps mismatch" not in r.getMessage()
    )
    # a kernel's run without DeepSpeed after one with it: transformers takes the world of one still up for a launch
    logging.getLogger("transformers.training_args").addFilter(
        lambda r: not (world()[2] == 1 and r.getMessage().startswith("torch.distributed process group is initialized"))
    )
    if hasattr(hf_logging, "set_tqdm_hook"):  # transformers >= 5.x: the bars of its own loops, one by one

        def no_shard_bar(factory, args, kwargs, previous=None):
            # save_pretrained's (one shard: "0%" then done) and from_pretrained's, a bar left at 0% in a notebook
            if kwargs.get("desc") in ("Writing model shards", "Loading weights"):
                return hf_logging.EmptyTqdm(*args, **kwargs)
            return previous(factory, args, kwargs) if previous else factory(*args, **kwargs)

        previous = hf_logging.set_tqdm_hook(no_shard_bar)
        if previous is not None:
            hf_logging.set_tqdm_hook(lambda f, a, k: no_shard_bar(f, a, k, previous))


DIST_TIMEOUT_S = 1800  # seconds before a collective or the rendezvous times out, unless WORKSHOP_DIST_TIMEOUT_S


def dist_timeout_s() -> int:
    """Seconds before a collective or the rendezvous times out (WORKSHOP_DIST_TIMEOUT_S, default DIST_TIMEOUT_S):
    a dead rank then fails the job instead of hanging it."""
    return variables.get("WORKSHOP_DIST_TIMEOUT_S", DIST_TIMEOUT_S)


def world() -> tuple[int, int, int]:
    """(rank, local_rank, world_size) from the launcher's variables; (0, 0, 1) without one."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def gpu_memory_fraction() -> float | None:
    """WORKSHOP_GPU_MEMORY_FRACTION (a number in (0, 1]) applied to this process's current GPU with
    `torch.cuda.set_per_process_memory_fraction`: PyTorch's allocator then holds at most that share of the GPU's
    memory, and raises out of memory beyond it, so an 80 GB GPU can stand in for a 40 GB one (0.5). Returns the
    fraction, or None where it is unset or there is no GPU.

    Raises:
        WorkshopError: the variable is not a number in (0, 1]."""
    fraction = variables.get("WORKSHOP_GPU_MEMORY_FRACTION")
    if fraction is None:
        return None
    if not 0 < fraction <= 1:
        raise WorkshopError(
            f"WORKSHOP_GPU_MEMORY_FRACTION={fraction!r} is not a share of the GPU's memory.",
            "set it to a number above 0 and at most 1 (0.5: half the GPU), or unset it.",
        )
    if not torch.cuda.is_available():
        return None
    torch.cuda.set_per_process_memory_fraction(fraction)
    return fraction


def gpu_free_mib() -> float | None:
    """The GPU memory a run started now could use, MiB: the free memory of this process's current GPU
    (`torch.cuda.mem_get_info`), and with WORKSHOP_GPU_MEMORY_FRACTION at most that share of its total less
    what PyTorch already reserved (`gpu_memory_fraction`). None without a GPU."""
    if not torch.cuda.is_available():
        return None
    fraction = gpu_memory_fraction()
    free, total = torch.cuda.mem_get_info()
    if fraction is not None:
        free = min(free, fraction * total - torch.cuda.memory_reserved())
    return free / MiB
