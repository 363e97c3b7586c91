"""Will it fit? One GPU's memory for a fine-tuning run, estimated before the run: model states (DeepSpeed's
estimators), activations (Korthikanti et al. 2022, counted for Qwen3) and logits, against the GPU's memory
(introduced in `03c_models_that_do_not_fit`, whose lessons hold an ipywidgets explorer over it).

    est = estimate("Qwen/Qwen3-8B", zero_stage=2, offload="none")  # est["fits"] False, est["total_gpu_mib"]
    explain(est)        # the verdict, and the smallest change up the ladder that fits
    check_fits(model="Qwen/Qwen3-8B", zero_stage=3)  # raises WorkshopError with the numbers and the fix

All sizes are MiB (2**20 bytes), per GPU unless said per node. Not counted: the CUDA context and libraries' workspaces
(about 0.5-1 GiB), the caching allocator's fragmentation, transient tensors of the backward pass, and ZeRO-3's gathered
layers and prefetch buckets beyond DeepSpeed's own estimate: `HEADROOM` keeps room for them."""

from __future__ import annotations

import dataclasses
import functools

from .ds_config import check_combination
from .errors import WorkshopError
from .gpus import MEMORY_MIB
from .memory import estimate_model_states
from .model import SHIPPED_CONFIGS, architecture_config, count_params
from .units import MiB

MODELS = [m for m in SHIPPED_CONFIGS if m.startswith("Qwen/Qwen3-")]
GPUS = MEMORY_MIB  # name -> total memory (MiB), from the one GPU table (`gpus.CATALOGUE`)
# Share of tokens whose logits are computed with logits_on "labelled" (the answers): 54,161 of the bundled
# SQuAD train set's 2,000,334 tokens = 2.7% (lab/findings/h100/bench/runs/default/results.json), rounded up.
LABELLED_FRACTION = 0.03
PAPER_CONSTANTS = (34, 5)  # eq. 1's GPT block: s·b·h·(34 + 5·a·s/h) bytes
# The one margin of every GPU memory verdict, as the share of the GPU's memory an estimate leaves free: a run fits
# (`estimate`) when its estimate fills at most 1 - HEADROOM = 85% of the GPU, the notebooks size micro-batches to
# 85% of the free memory (`micro_batch_budget`), the preflight refuses model states alone past 85% (`states_fit`).
# The 15% holds what the estimate leaves out: the CUDA context, libraries' workspaces (cuBLAS, NCCL), the caching
# allocator's fragmentation, ZeRO-3's gathered layers and prefetch buckets, transient tensors: in every reference run
# torch's peak allocated plus the memory outside it stays within estimate / (1 - HEADROOM) (tests/test_gpu_budget.py).
HEADROOM = 0.15


@functools.cache
def model_shape(model: str) -> dict:
    """`count_params(model)` plus the widths the activations depend on (cached: each model is counted on the
    meta device once per process). Keys: num_params, largest_layer_params, num_layers, hidden_size,
    vocab_size, num_attention_heads, num_key_value_heads, head_dim, intermediate_size."""
    c = architecture_config(model)
    return count_params(model) | {
        k: getattr(c, k) for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size")
    }


def layer_activation_bytes(s: int, b: int, h: int, a: int, constants=PAPER_CONSTANTS, flash_attention=True) -> float:
    """Bytes one transformer layer keeps for its backward pass, Korthikanti et al. 2022 ("Reducing Activation
    Recomputation in Large Transformer Models"), eq. 1: s·b·h·(C + S·a·s/h), s tokens per sequence, b sequences,
    h hidden size, a attention heads; (C, S) = (34, 5) for the paper's GPT block. Flash attention (and SDPA's
    flash kernel) keeps no a x s x s attention scores, so the S term drops."""
    c, score = constants
    return s * b * h * (c + (0 if flash_attention else score * a * s / h))


def qwen3_constants(shape: dict, flash_attention: bool = True) -> tuple[float, float]:
    """(C, S) of eq. 1 for a Qwen3 block, counted tensor by tensor as the paper's section 4.1 counts a GPT
    block, for transformers' own Qwen3 code with bf16 weights (as DeepSpeed trains it). The paper's 34 assumes
    a 4h GeLU MLP, LayerNorm, dropout and full multi-head attention; Qwen3 has a SwiGLU MLP of width
    intermediate_size, RMSNorm (computed in fp32) also on queries and keys, grouped-query attention (fewer
    key/value heads) and no dropout. Measured against a GPU's forward pass by lab/scripts/activation_bytes.py
    (SDPA, whose flash kernel keeps what flash_attention_2 keeps: Q, K, V, output, logsumexp; eager attention;
    compiled blocks, for which this count is an upper bound); the H100's figures are in
    lab/findings/h100/activations/summary.json, and tests/test_docs.py checks this count against them. The HF Trainer
    alone (fp32 weights, bf16 autocast) keeps its norms' tensors in fp32: more than this count (not measured)."""
    h, i, a = shape["hidden_size"], shape["intermediate_size"], shape["num_attention_heads"]
    q, kv = a * shape["head_dim"], shape["num_key_value_heads"] * shape["head_dim"]  # query and key/value widths
    # Bytes per token. Each of the 2 RMSNorms: its input upcast to fp32 (4h), the normalised bf16 copy (2h) and
    # the weighted output, the next projections' input (2h).
    norms = 2 * (4 + 2 + 2) * h
    # q_norm and k_norm: fp32 input and bf16 normalised copy (4 + 2 bytes); RoPE's products keep only cos, sin.
    qk_norms = 6 * q + 6 * kv
    if flash_attention:  # Q, K, V after RoPE (2q + 2kv + 2kv), the output = o_proj's input (2q), fp32 logsumexp (4a)
        attention = 4 * q + 4 * kv + 4 * a
    else:  # a copy of Q, K and V repeated to all a heads (repeat_kv), o_proj's input: 4 x 2q
        attention = 8 * q
    mlp = 8 * i  # SiLU input (gate output) 2i, SiLU output and up output 2i + 2i, down_proj's input 2i
    # Eager attention's scores, per token: the fp32 softmax output (4·a·s) and its bf16 copy (2·a·s); the
    # paper's 5 is softmax output 2 + dropout mask 1 + dropout output 2.
    return (norms + qk_norms + attention + mlp) / h, 6


def activation_bytes(
    shape: dict, s: int, b: int, flash_attention=True, activation_checkpointing=False
) -> tuple[float, str]:
    """(bytes of activations on one GPU, the formula as a string) for a micro-batch of b sequences of s tokens.
    Without checkpointing: every layer's eq. 1. With it (paper sections 4-5, full recomputation): each layer
    keeps only its input, 2·s·b·h, and the backward pass recomputes one layer at a time, adding one layer's
    full activations. Both add the final RMSNorm, 8·s·b·h. Data parallelism does not shrink activations."""
    L, h, a = shape["num_layers"], shape["hidden_size"], shape["num_attention_heads"]
    consts = qwen3_constants(shape, flash_attention)
    layer = layer_activation_bytes(s, b, h, a, consts, flash_attention)
    per_layer = f"s·b·h·({consts[0]:.1f}" + ("" if flash_attention else f" + 6·a·s/h, a={a}") + ")"
    if activation_checkpointing:
        total, formula = L * 2 * s * b * h + layer, f"{L} x 2·s·b·h + {per_layer} + 8·s·b·h"
    else:
        total, formula = L * layer, f"{L} x {per_layer} + 8·s·b·h"
    attn = "flash attention" if flash_attention else "eager attention"
    return total + 8 * s * b * h, f"{formula}, s={s} b={b} h={h} (Korthikanti et al. 2022 eq. 1, Qwen3, {attn})"


def states_fit(states_gpu_mib: float, gpu_memory_mib: float) -> bool:
    """The preflight's rule (`preflight.check_states_fit`) for the model states (`memory.estimate_model_states`, MiB
    per GPU) on a GPU of `gpu_memory_mib` MiB: within 1 - `HEADROOM` of its memory, the share `estimate` holds the whole total
    to, so that a run that fits passes the preflight (the states are certain before a run, activations estimated)."""
    return states_gpu_mib <= (1 - HEADROOM) * gpu_memory_mib


def _check(model, zero_stage, offload, gpu, logits_on, host_memory_mib, **sizes) -> None:
    if model not in MODELS:
        raise WorkshopError(f"No architecture config ships for {model!r}.", f"use one of {', '.join(MODELS)}.")
    if gpu not in GPUS:
        raise WorkshopError(
            f"Unknown GPU {gpu!r}.",
            f"use one of {', '.join(GPUS)}, or add yours to gpus.CATALOGUE "
            "(memory in MiB, as `nvidia-smi --query-gpu=memory.total --format=csv` prints it).",
        )
    check_combination(zero_stage, offload, offload if zero_stage == 3 else "none")
    if logits_on not in ("all", "labelled"):
        raise WorkshopError(f"logits_on={logits_on!r}: not an option.", "give logits_on 'all' or 'labelled'.")
    given = {"host_memory_mib": host_memory_mib} if host_memory_mib is not None else {}
    for name, v in (sizes | given).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 1:
            raise WorkshopError(f"{name}={v!r}: must be a positive number.", f"give {name} as 1 or more.")


def estimate(
    model: str = "Qwen/Qwen3-4B",
    zero_stage: int | None = 3,
    offload: str = "cpu",
    gpus_per_node: int = 1,
    nodes: int = 1,
    train_micro_batch_size_per_gpu: int = 1,
    max_length: int = 4096,
    activation_checkpointing: bool = False,
    logits_on: str = "labelled",
    gpu: str = "H100 80GB",
    host_memory_mib: float | None = None,
    flash_attention: bool = True,
) -> dict:
    """Memory per GPU (and per node's host) of fine-tuning `model` with Adam, in MiB rounded to 0.1.

    Args:
        model: one of `MODELS` (the Qwen3 models whose configs ship; counted on the meta device).
        zero_stage: None (HF Trainer alone, torch AdamW: 16 bytes/param on the GPU), 0, 1, 2 or 3.
        offload: "none"; "cpu" (the optimizer states to the CPU, at stage 3 the parameters too, as the
            workshop's stage3_offload does).
        gpus_per_node, nodes: the data-parallel world; ZeRO partitions model states over all of it.
        train_micro_batch_size_per_gpu, max_length: b sequences of s tokens per forward pass (padded to s).
        activation_checkpointing: recompute each layer's activations in the backward pass.
        logits_on: "all": s·b·vocab logits in bf16 (2 bytes) and their fp32 upcast for the loss (4);
            "labelled" (the workshop's default: the LM head only where the loss has a target): the same for
            `LABELLED_FRACTION` (3%) of the tokens.
        gpu: a key of `GPUS`. host_memory_mib: the node's memory, to check the offloaded states against.
        flash_attention: flash attention or SDPA's flash kernel (the workshop's default), else eager.

    Returns: num_params, model_states_gpu_mib and model_states_cpu_mib (`memory.estimate_model_states`:
    DeepSpeed's estimate_zero2/zero3_model_states_mem_needs), activations_gpu_mib (`activation_bytes`), logits_gpu_mib, total_gpu_mib, gpu_memory_mib, usable_gpu_mib (1 -
    `HEADROOM` of it), spare_mib (usable_gpu_mib - total_gpu_mib), fits, estimator, activation_formula, config (for
    `explain`). "fits": the total within usable_gpu_mib, the host states within host_memory_mib.

    Raises:
        WorkshopError: an unknown model or GPU, offload without a partitioning stage, a size below 1."""
    config = dict(locals())  # the arguments, for explain and smallest_fix
    _check(
        model,
        zero_stage,
        offload,
        gpu,
        logits_on,
        host_memory_mib,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        train_micro_batch_size_per_gpu=train_micro_batch_size_per_gpu,
        max_length=max_length,
    )
    shape = model_shape(model)
    offloads = offload != "none"  # the optimizer states; at stage 3 the parameters too (stage3_offload)
    states = estimate_model_states(
        shape["num_params"],
        shape["largest_layer_params"],
        zero_stage,
        offloads,
        offloads and zero_stage == 3,
        gpus_per_node,
        nodes,
    )
    gpu_states, cpu_states = states["estimated_model_states_gpu_mib"], states["estimated_model_states_cpu_mib"]
    s, b = max_length, train_micro_batch_size_per_gpu
    act, formula = activation_bytes(shape, s, b, flash_attention, activation_checkpointing)
    logits = s * b * shape["vocab_size"] * (2 + 4) * (1 if logits_on == "all" else LABELLED_FRACTION)
    total = gpu_states + act / MiB + logits / MiB
    memory, usable = GPUS[gpu], (1 - HEADROOM) * GPUS[gpu]
    host_ok = host_memory_mib is None or cpu_states <= host_memory_mib
    fits = total <= usable and host_ok  # states_fit too: the states are part of the total
    return {
        "num_params": shape["num_params"],
        "model_states_gpu_mib": gpu_states,
        "model_states_cpu_mib": cpu_states,
        "activations_gpu_mib": round(act / MiB, 1),
        "logits_gpu_mib": round(logits / MiB, 1),
        "total_gpu_mib": round(total, 1),
        "gpu_memory_mib": memory,
        "usable_gpu_mib": round(usable, 1),
        "spare_mib": round(usable - total, 1),
        "fits": fits,
        "estimator": states["estimator"],
        "activation_formula": formula,
        "config": config,
    }


def setup(config: dict, where: bool = False) -> str:
    """The run's memory setup in words: "ZeRO-3 + CPU offload + activation checkpointing[ on 2 x H100 80GB]"."""
    c = config
    s = (
        ("HF Trainer (torch AdamW)" if c["zero_stage"] is None else f"ZeRO-{c['zero_stage']}")
        + {"none": "", "cpu": " + CPU offload"}[c["offload"]]
        + (" + activation checkpointing" if c["activation_checkpointing"] else "")
    )
    gpus = f"{c['nodes']} nodes x {c['gpus_per_node']}" if c["nodes"] > 1 else str(c["gpus_per_node"])
    return s + (f" on {gpus} x {c['gpu']}" if where else "")


# The ladder, in the course's own order, the cheapest in speed first: every rung that keeps the model states on
# the GPU (smaller micro-batch, activation checkpointing, ZeRO-2 and ZeRO-3 on these GPUs, then on more: `WORLDS`)
# before any offload (CPU Adam and PCIe copies, the slowest in the reference runs: 03c's ratios, tests/test_docs.py),
# each rung keeps what the ones before it added. HF's DeepSpeed guide also starts small but tries
# ZeRO-2 + CPU offload before ZeRO-3 and adds hardware only at its last step. Shorter sequences come last: new data.
LADDER = [
    "smaller micro-batch",
    "activation checkpointing",
    "ZeRO-2",
    "ZeRO-3",
    "ZeRO-2 + CPU offload",
    "ZeRO-3 + CPU offload",
    "shorter sequences",
]
WORLDS = [(2, 1), (4, 1), (8, 1), (8, 2), (8, 4), (8, 8), (8, 16)]  # (gpus_per_node, nodes), growing


def ladder(config: dict) -> list[dict]:
    """`estimate`'s arguments for every rung of `LADDER` above `config`, in the order they are tried (rungs a
    configuration cannot take are left out: a ZeRO stage below the run's, offload below ZeRO-1)."""
    c, b = dict(config), config["train_micro_batch_size_per_gpu"]
    batches = [b >> k for k in range(7) if b >> k >= 1]  # b, b/2, ..., 1 sequences per micro-batch
    out = [dict(c, train_micro_batch_size_per_gpu=x) for x in batches[1:]]
    ac = dict(c, activation_checkpointing=True)
    out += [dict(ac, train_micro_batch_size_per_gpu=x) for x in batches] if not c["activation_checkpointing"] else []
    here = (c["gpus_per_node"], c["nodes"])
    worlds = [here] + [(g, n) for g, n in WORLDS if g * n > here[0] * here[1] and g >= here[0]]
    stages = [z for z in (2, 3) if c["zero_stage"] is None or z >= c["zero_stage"]]
    groups = [[(z, "none") for z in stages], [(z, "cpu") for z in stages]]  # rungs 2 and 3
    for group in groups:
        for g, n in worlds:
            out += [
                dict(ac, zero_stage=z, offload=o, gpus_per_node=g, nodes=n, train_micro_batch_size_per_gpu=x)
                for z, o in group
                for x in batches
            ]
    top, s = dict(ac, zero_stage=3, offload="cpu", train_micro_batch_size_per_gpu=1), c["max_length"]
    return out + [dict(top, max_length=s >> k) for k in range(1, 7) if s >> k >= 256]


def _first_fit(config: dict, candidates) -> dict | None:
    for c in candidates:
        if c != config and (e := estimate(**c))["fits"]:
            world = (c["gpus_per_node"], c["nodes"]) != (config["gpus_per_node"], config["nodes"])
            b, s = c["train_micro_batch_size_per_gpu"], c["max_length"]
            smaller = (b, s) != (config["train_micro_batch_size_per_gpu"], config["max_length"])
            return {
                "change": setup(c, where=world) + (f", micro-batch {b} x {s} tokens" if smaller else ""),
                "config": c,
                "estimate": e,
            }
    return None


def smallest_fix(est: dict) -> dict | None:
    """The first configuration of `ladder` (`LADDER`: smaller micro-batch -> activation checkpointing -> ZeRO-2,
    ZeRO-3 on these GPUs then on more -> ZeRO-2/ZeRO-3 + CPU offload, on these GPUs then
    on more -> shorter sequences) that `estimate` says fits, as {"change": in words, "config": estimate's
    arguments, "estimate": its result}; None when none does."""
    return _first_fit(est["config"], ladder(est["config"]))


def fix_on_these_gpus(est: dict) -> dict | None:
    """`smallest_fix` among the rungs that keep the run's number of GPUs (offload, where more GPUs are not to
    be had); None when none fits."""
    c = est["config"]
    return _first_fit(c, [x for x in ladder(c) if (x["gpus_per_node"], x["nodes"]) == (c["gpus_per_node"], c["nodes"])])


def _mib(x) -> str:
    return f"{x:,.0f} MiB"


def explain(est: dict) -> str:
    """One or two sentences: the verdict with its numbers and, when it does not fit, the smallest change that
    does (`smallest_fix`), and where that change takes more GPUs, the change that fits on the run's own GPUs
    (`fix_on_these_gpus`: offload, with slower steps)."""
    c = est["config"]
    s = (
        f"{c['model']} with {setup(c, where=True)} {'fits' if est['fits'] else 'does not fit'}: "
        f"~{_mib(est['total_gpu_mib'])} per GPU (model states {est['model_states_gpu_mib']:,.0f}, activations "
        f"{est['activations_gpu_mib']:,.0f}, logits {est['logits_gpu_mib']:,.0f}) of the "
        f"{_mib(est['usable_gpu_mib'])} a run may fill ({1 - HEADROOM:.0%} of {_mib(est['gpu_memory_mib'])})"
    )
    if est["model_states_cpu_mib"]:
        s += f", and {_mib(est['model_states_cpu_mib'])} of host memory per node" + (
            f" of {_mib(c['host_memory_mib'])}" if c["host_memory_mib"] else ""
        )
    if est["fits"]:
        return s + f"; {_mib(est['spare_mib'])} to spare."
    fix = smallest_fix(est)
    if fix is None:
        return s + (
            ". Nothing on the ladder fits (up to ZeRO-3 + offload + activation checkpointing, 128 GPUs, "
            "micro-batch 1 of 256 tokens): a GPU with more memory, or a smaller model."
        )
    s += f". Smallest change that fits: {fix['change']} (~{_mib(fix['estimate']['total_gpu_mib'])} per GPU)"
    here = (c["gpus_per_node"], c["nodes"])
    if (fix["config"]["gpus_per_node"], fix["config"]["nodes"]) != here and (alt := fix_on_these_gpus(est)):
        s += (
            f"; on the {here[0] * here[1]} GPU{'s' if here[0] * here[1] > 1 else ''} you have, {alt['change']} "
            f"(~{_mib(alt['estimate']['total_gpu_mib'])} per GPU, slower steps)"
        )
    return s + "."


def check_fits(**kw) -> dict:
    """`estimate(**kw)` when it fits. Raises: WorkshopError with the numbers, and the smallest change that fits
    as the "To fix" line, when it does not."""
    est = estimate(**kw)
    if est["fits"]:
        return est
    c, world = est["config"], est["config"]["gpus_per_node"] * est["config"]["nodes"]
    who = f"{c['model']} with {setup(c)}" + (f" on {world} GPUs" if world > 1 else "")
    if est["total_gpu_mib"] > est["usable_gpu_mib"]:
        parts = f"model states {est['model_states_gpu_mib']:,.0f} + activations {est['activations_gpu_mib']:,.0f}"
        parts += f" + logits {est['logits_gpu_mib']:,.0f}" if est["logits_gpu_mib"] >= 1 else ""
        problem = (
            f"{who} needs ~{_mib(est['total_gpu_mib'])} per GPU ({parts}), more than {1 - HEADROOM:.0%} of the "
            f"{c['gpu']}'s {_mib(est['gpu_memory_mib'])} ({HEADROOM:.0%} kept as headroom)."
        )
    else:
        problem = (
            f"{who} needs ~{_mib(est['model_states_cpu_mib'])} of host memory per node for its model states, "
            f"the node has {_mib(c['host_memory_mib'])}."
        )
    fix = smallest_fix(est)
    raise WorkshopError(
        problem,
        f"{fix['change']} fits (~{_mib(fix['estimate']['total_gpu_mib'])} per GPU)."
        if fix
        else "nothing on the ladder fits: a GPU with more memory, or a smaller model.",
    )


def table(est: dict):
    """The estimate as a pandas DataFrame: one row per quantity, columns MiB and GiB (None where not estimated)."""
    import pandas as pd

    rows = {
        "model states, GPU": est["model_states_gpu_mib"],
        "activations": est["activations_gpu_mib"],
        "logits": est["logits_gpu_mib"],
        "total per GPU": est["total_gpu_mib"],
        "GPU memory": est["gpu_memory_mib"],
        f"usable ({1 - HEADROOM:.0%})": est["usable_gpu_mib"],
        "to spare": est["spare_mib"],
        "model states, host per node": est["model_states_cpu_mib"],
    }
    return pd.DataFrame({"MiB": rows, "GiB": {k: None if v is None else round(v / 1024, 1) for k, v in rows.items()}})


def plot(est: dict, ax=None):
    """A horizontal stacked bar of one GPU's memory (model states, activations, logits) against a dashed line at
    the GPU's memory, plus the host's offloaded states per node where there are any; GiB. Returns the Axes."""
    import matplotlib.pyplot as plt

    own = ax is None
    ax = ax if ax is not None else plt.subplots(figsize=(10, 2.6))[1]
    c, gib = est["config"], (lambda mib: (mib or 0) / 1024)
    left = 0.0
    for label, key, color in (
        ("model states", "model_states_gpu_mib", "tab:blue"),
        ("activations", "activations_gpu_mib", "tab:orange"),
        ("logits", "logits_gpu_mib", "tab:green"),
    ):
        ax.barh(0, gib(est[key]), left=left, color=color, label=label)
        left += gib(est[key])
    ax.vlines(
        gib(est["usable_gpu_mib"]),
        -0.45,
        0.45,
        colors="black",
        linestyles="--",
        label=f"{1 - HEADROOM:.0%} of the {c['gpu']}'s memory ({HEADROOM:.0%} headroom)",
    )
    ticks = ["each GPU"]
    if est["model_states_cpu_mib"]:
        ax.barh(
            1,
            gib(est["model_states_cpu_mib"]),
            color="tab:purple",
            label="model states off the GPU (host: DeepSpeed's CPU column)",
        )
        ticks.append("host, per node")
    if est["model_states_cpu_mib"] and c["host_memory_mib"]:
        ax.vlines(gib(c["host_memory_mib"]), 0.55, 1.45, colors="gray", linestyles="--", label="host memory")
    ax.set_yticks(range(len(ticks)), ticks)
    ax.set_xlabel("memory (GiB = 1024 MiB)")
    ax.set_title(
        f"{c['model']}, {setup(c)}: {'fits' if est['fits'] else 'does not fit'} "
        f"({gib(est['total_gpu_mib']):.1f} of {gib(est['usable_gpu_mib']):.1f} GiB per GPU)",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # beside the bars, not over them
    if own:
        ax.figure.tight_layout()
    return ax


@dataclasses.dataclass(frozen=True)
class Budget:
    """A micro-batch token budget sized for a GPU by `micro_batch_budget`. MiB throughout."""

    tokens: int | None  # the largest budget tried whose estimates fit; None: not even the smallest
    most: int  # the first budget tried (the recipe's)
    least: int  # the last
    free_mib: float
    setup: str  # the setup with the largest estimate at `tokens` (at the smallest budget when none fits)
    estimate_mib: float  # its estimate there
    above_mib: float | None  # its estimate at twice `tokens`, which did not fit (None when tokens == most)

    def line(self, runs: str = "every run") -> str:
        """One line: what was chosen and why, for a notebook to print."""
        if self.tokens is None:
            return (
                f"Even micro-batches of {self.least:,} tokens need ~"
                f"{self.estimate_mib:,.0f} MiB ({self.setup}), more than {1 - HEADROOM:.0%} of this GPU's "
                f"{self.free_mib:,.0f} MiB free."
            )
        why = (
            f"fit.estimate of {runs} stays within {1 - HEADROOM:.0%} of this GPU's {self.free_mib:,.0f} MiB free: "
            f"the largest, {self.setup}, needs ~{self.estimate_mib:,.0f} MiB"
        )
        if self.above_mib is None:
            return f"Micro-batches of up to {self.tokens:,} tokens, the recipe's: {why}."
        return (
            f"Micro-batches of up to {self.tokens:,} tokens, the recipe's {self.most:,} halved until {why} "
            f"(~{self.above_mib:,.0f} MiB at {2 * self.tokens:,})."
        )


def micro_batch_budget(
    model: str, setups: dict[str, dict], free_mib: float, most: int = 32768, least: int = 512
) -> Budget:
    """The largest micro-batch token budget, `most` halved down to `least`, at which `estimate` of every setup fits
    1 - `HEADROOM` of `free_mib`, estimated as one sequence of T tokens (with flash attention, activations and logits
    grow with a micro-batch's tokens, not with how they are split into sequences).

    Args:
        model: one of `MODELS`. setups: name -> estimate's keyword arguments (zero_stage, offload,
            activation_checkpointing, logits_on, ...), e.g. {"stage3": {"zero_stage": 3, "offload": "none"}}.
        free_mib: the GPU memory a run may use, MiB (`env.gpu_free_mib`).

    Returns: `Budget`. Raises: WorkshopError from `estimate` (an unknown model, an impossible setup).
    """
    tried = [most >> k for k in range(16) if most >> k >= least]
    at = {
        t: max(
            ((estimate(model, max_length=t, **kw)["total_gpu_mib"], name) for name, kw in setups.items()),
            key=lambda x: x[0],
        )
        for t in tried
    }  # the first setup of the largest estimate
    fits = [t for t in tried if at[t][0] <= (1 - HEADROOM) * free_mib]
    tokens = fits[0] if fits else None
    mib, name = at[tokens if tokens else tried[-1]]
    above = at[2 * tokens][0] if tokens and tokens != most else None
    return Budget(tokens, most, tried[-1], free_mib, name, mib, above)
