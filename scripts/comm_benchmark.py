"""What ZeRO's communication costs on this node: the collectives DeepSpeed 0.19.8 runs every optimizer step, timed
at the sizes a model's gradients and parameters have, beside the step time they could explain. DeepSpeed's own
`ds_bench` is not in its wheel (the `benchmarks` package is missing), so this times `torch.distributed` directly.

ZeRO-1/2 on N GPUs, per optimizer step, as DeepSpeed 0.19.8 issues them (workshop_lessons/multi_gpu.py's docstring
cites the functions): an all-reduce of each bucket of `reduce_bucket_size` 16-bit gradients
(`use_multi_rank_bucket_allreduce`, on by default; the ZeRO paper's reduce-scatter moves half of it) and an
all-gather of the updated 16-bit parameters. ZeRO-3 reduce-scatters its gradient buckets (timed too, its own row)
and all-gathers each layer's parameters in the passes. Bandwidths as NVIDIA's nccl-tests report them
(doc/PERFORMANCE.md): algbw = bytes / time; busbw = algbw x (N-1)/N for reduce-scatter and all-gather, x 2(N-1)/N
for all-reduce, comparable with the links' peak whatever N is.

    torchrun --standalone --nproc_per_node 4 scripts/comm_benchmark.py --model Qwen/Qwen3-0.6B --out comm.csv

Writes one row per collective and size (`issued_by`: the ZeRO stages that issue it at the model's sizes; MiB, median
ms over --iters after --warmup, algbw and busbw GB/s, and for the model's sizes the ms per optimizer step); NCCL on
GPUs, gloo on the CPU (where reduce-scatter is missing, that row says so).
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

# torch 2.13 renamed the single-tensor collectives (the *_tensor names still work, with a warning)
reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
OPS = {  # name: (call on (shard, full), busbw factor for N ranks)
    "reduce_scatter": (lambda shard, full: reduce_scatter(shard, full), lambda n: (n - 1) / n),
    "all_gather": (lambda shard, full: all_gather(full, shard), lambda n: (n - 1) / n),
    "all_reduce": (lambda out, inp: dist.all_reduce(inp), lambda n: 2 * (n - 1) / n),
}


def time_op(op: str, numel: int, device, iters: int, warmup: int) -> float | None:
    """Median seconds of `op` on `numel` bf16 elements in all (the full, unsharded tensor), or None where the
    backend lacks it."""
    n = dist.get_world_size()
    numel -= numel % n
    full = torch.ones(numel, dtype=torch.bfloat16, device=device)
    shard = torch.empty(numel // n, dtype=torch.bfloat16, device=device)
    call = OPS[op][0]
    times = []
    try:
        for i in range(warmup + iters):
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            call(shard, full)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t)
    except (RuntimeError, NotImplementedError):  # gloo: no reduce_scatter_tensor
        return None
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="Qwen/Qwen3-0.6B", help="its parameter count sets the per-step sizes")
    p.add_argument(
        "--reduce-bucket-size",
        type=int,
        default=500_000_000,
        help="gradient elements per bucket (the default recipe's)",
    )
    p.add_argument("--sizes-mib", type=float, nargs="*", default=[16, 64, 256], help="further sizes to sweep")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--out", default="comm.csv")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda") if cuda else torch.device("cpu")
    rank, n = dist.get_rank(), dist.get_world_size()

    from workshop_lib.model import count_params
    from workshop_lib.units import MiB

    params = count_params(args.model)["num_params"]
    bucket = min(args.reduce_bucket_size, params)
    rows = []
    cases = [(op, int(mib * MiB / 2), "sweep", "") for mib in args.sizes_mib for op in OPS]
    cases += [
        ("all_reduce", bucket, "gradient bucket", "ZeRO-1/2"),  # DeepSpeedZeroOptimizer.average_tensor
        ("all_gather", params, "parameters", "ZeRO-1/2"),  # all_gather_dp_groups, after the optimizer step
        ("reduce_scatter", bucket, "gradient bucket", "ZeRO-3"),  # reduce_scatter_coalesced
    ]
    for op, numel, what, issued_by in cases:
        sec = time_op(op, numel, device, args.iters, args.warmup)
        size = numel * 2
        row = {
            "world_size": n,
            "op": op,
            "what": what,
            "issued_by": issued_by,
            "mib": round(size / MiB, 1),
            "ms": None if sec is None else round(sec * 1e3, 3),
            "algbw_gbps": None if sec is None else round(size / sec / 1e9, 1),
            "busbw_gbps": None if sec is None else round(size / sec / 1e9 * OPS[op][1](n), 1),
        }
        if what != "sweep" and sec is not None:  # the step moves params/bucket buckets of gradients
            row["ms_per_step"] = round(sec * 1e3 * (params / bucket if what == "gradient bucket" else 1), 1)
        rows.append(row)
    if rank == 0:
        import pandas as pd

        df = pd.DataFrame(rows)
        df.to_csv(args.out, index=False)
        print(
            f"{args.model}: {params:,} parameters, {n} ranks ({'NCCL' if cuda else 'gloo'}); "
            f"ZeRO-2 all-reduces {params * 2 / MiB:,.0f} MiB of gradients and all-gathers as many of parameters per "
            "optimizer step"
        )
        print(df.to_string(index=False))
        mine = df[df["issued_by"] == "ZeRO-1/2"]
        step = mine["ms_per_step"].sum() if "ms_per_step" in df else float("nan")
        print(f"ZeRO-2's collectives as DeepSpeed issues them, unoverlapped: {step:,.1f} ms per step; wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
