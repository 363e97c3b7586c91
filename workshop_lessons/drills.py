"""Failure drills of notebook 03d (`03d_failure_drills`; 03c shows the third, out of memory): two classic ways a
DeepSpeed run dies, each produced for real by DeepSpeed itself on the tiny model, and returned as data the
notebook shows. Nothing here is mocked or typed in: the error text is what DeepSpeed printed, the loss scales are
what its loss scaler held.

- `batch_size_mismatch(fixed)`: a 2-rank CPU job (torch.distributed.run, gloo) whose DeepSpeed config was
  computed for one rank. DeepSpeed's `DeepSpeedConfig._batch_assertion` (deepspeed/runtime/config.py) refuses it;
  the config built for the world that runs it (`build_ds_config(..., Settings(world_size=2))`) trains.
- `fp16_overflow(steps)`: a model with a "massive activation" above fp16's largest number (65504) trained in
  fp16 with DeepSpeed's dynamic loss scaler (every step overflows, the scale halves until DeepSpeed gives up) and
  in bf16 (finite losses). `plot_fp16_overflow` draws the loss scale per step.

The rank-side code of the first drill is this module's command line:
`python -m workshop_lessons.drills batch-size-rank --micro 4 --accum 4 --config-world-size 1`.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator

from workshop_lib import env, teardown
from workshop_lib.data import encode_example, load_squad, make_collator
from workshop_lib.ds_config import Settings, build_ds_config
from workshop_lib.errors import WorkshopError
from workshop_lib.model import load_model_and_tokenizer

PACKAGE_PARENT = Path(__file__).resolve().parents[1]  # the folder holding workshop_lib/, for the ranks' imports
FP16_MAX = 65504.0  # torch.finfo(torch.float16).max: 5 exponent bits; bf16 keeps fp32's 8 (max ~3.4e38)
# DeepSpeed's own wording, matched in the ranks' stderr and in the exception of its loss scaler.
BATCH_ASSERTION = "Check batch related parameters"
AT_MINIMUM = "Current loss scale already at minimum"


def _resolve_auto(cfg: dict, num_params: int, lr: float) -> dict:
    """`cfg` (from `build_ds_config`) with the "auto" values filled as the HF Trainer integration fills them, for
    a bare `deepspeed.initialize` without a Trainer: gradient clipping 1.0, AdamW lr `lr`, betas (0.9, 0.999),
    eps 1e-8, no weight decay (the Trainer's defaults), and a reduce bucket of the whole model (one all-reduce;
    `train.build_trainer` caps it the same way)."""
    cfg = copy.deepcopy(cfg)
    cfg["gradient_clipping"] = 1.0
    cfg["optimizer"]["params"] = {"lr": lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    if cfg["zero_optimization"].get("reduce_bucket_size") == "auto":
        cfg["zero_optimization"]["reduce_bucket_size"] = num_params
    return cfg


# ---------------------------------------------------------------------------------------------- drill 1


def _batch_config(micro: int, accum: int, config_world_size: int) -> dict:
    """The drill's DeepSpeed config: ZeRO stage 0, fp32 (the CPU's precision), batch sizes for `config_world_size`."""
    return build_ds_config(
        "stage0",
        Settings(
            precision="fp32",
            train_micro_batch_size_per_gpu=micro,
            gradient_accumulation_steps=accum,
            world_size=config_world_size,
        ),
    )


def _batch_size_rank(argv: list[str]) -> int:
    """One rank of `batch_size_mismatch` (run by torch.distributed.run): `deepspeed.initialize` on the tiny model
    with the config built for --config-world-size ranks (torch's AdamW as the client optimizer), then one optimizer
    step (--accum micro-batches of --micro random 32-token sequences; gloo averages the gradients over the ranks).
    Rank 0 prints one line.
    A mismatched config never gets past `deepspeed.initialize`: DeepSpeed's assertion ends the process."""
    p = argparse.ArgumentParser(prog="python -m workshop_lessons.drills")
    p.add_argument("command", choices=["batch-size-rank"], help="the one command: a rank of `batch_size_mismatch`")
    p.add_argument("--micro", type=int, required=True, help="train_micro_batch_size_per_gpu, sequences")
    p.add_argument("--accum", type=int, required=True, help="gradient_accumulation_steps")
    p.add_argument("--config-world-size", type=int, required=True, help="the world size the config is built for")
    a = p.parse_args(argv)
    # DeepSpeed here, not at the top: importing it picks the accelerator and probes its ops; env settles both first
    import deepspeed

    env.quiet_libraries()
    torch.manual_seed(0)
    model, tok, info = load_model_and_tokenizer(tiny=True)
    cfg = _resolve_auto(_batch_config(a.micro, a.accum, a.config_world_size), info["num_params"], lr=1e-4)
    # torch's AdamW as the client optimizer, with the config's settings: DeepSpeed's own (FusedAdam) would first
    # JIT-build its CPU op, tens of seconds on a fresh machine, for a drill about the batch arithmetic
    opt = cfg.pop("optimizer")["params"]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=opt["lr"], betas=tuple(opt["betas"]), eps=opt["eps"], weight_decay=opt["weight_decay"]
    )
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
    g = torch.Generator().manual_seed(engine.global_rank)  # each rank its own data, as a sampler would give
    for _ in range(engine.gradient_accumulation_steps()):
        ids = torch.randint(len(tok), (a.micro, 32), generator=g)
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()  # updates the weights at the accumulation boundary only
    if engine.global_rank == 0:
        print(
            f"rank 0 of {engine.world_size}: deepspeed.initialize accepted train_batch_size "
            f"{engine.train_batch_size()} = {engine.train_micro_batch_size_per_gpu()} x "
            f"{engine.gradient_accumulation_steps()} x {engine.world_size}; {engine.global_steps} optimizer step "
            f"done, last micro-batch loss {loss.item():.3f}",
            flush=True,
        )
    return 0


def batch_size_mismatch(
    fixed: bool = False, micro: int = 4, accum: int = 4, nproc: int = 2, timeout_s: float = 180
) -> dict:
    """Launch `nproc` CPU ranks (`python -m torch.distributed.run`, gloo) that each call `deepspeed.initialize`
    with a config whose train_batch_size was computed for one rank (`fixed=False`: micro x accum x 1), or for
    the `nproc` ranks that run it (`fixed=True`, `build_ds_config(..., Settings(world_size=nproc))`).

    DeepSpeed checks train_batch_size == train_micro_batch_size_per_gpu x gradient_accumulation_steps x
    world_size in `DeepSpeedConfig._batch_assertion` (deepspeed/runtime/config.py), with the world size it reads
    from the process group, and every rank fails with an AssertionError before any training: 16 != 4 x 4 x 2.

    The ranks run on the CPU whatever the machine (DS_ACCELERATOR=cpu, CUDA_VISIBLE_DEVICES empty): the drill is
    about the config, not the hardware. The caller's os.environ is not changed; its RANK, MASTER_PORT... are not
    passed on (the launcher sets them per rank, MASTER_PORT a free port). The first launch on a machine also
    JIT-builds DeepSpeed's CPU communication op (shm_comm); the ranks step with torch's AdamW, so no optimizer op
    is built.

    Returns:
        {"command": the launch command (str), "returncode": int (1 mismatched, 0 fixed), "world_size": nproc,
         "config": {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"} as sent,
         "error_lines": DeepSpeed's assertion line(s) from the ranks' stderr, deduplicated ([] when fixed),
         "arithmetic": "16 != 4 x 4 x 2 = 32" (from DeepSpeed's own numbers) or "32 == 4 x 4 x 2",
         "output_lines": rank 0's line after one optimizer step ([] when mismatched),
         "fixed_config": the batch sizes `build_ds_config(..., Settings(world_size=nproc))` writes for the world that runs it
         ({"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "world_size"})}

    Raises:
        WorkshopError: the launch timed out after `timeout_s` s, or ended otherwise than the drill shows (the
            mismatch ran, or failed without DeepSpeed's assertion; the fixed config failed): the message holds
            the end of its output.
    """
    config_world = nproc if fixed else 1
    cfg = _batch_config(micro, accum, config_world)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--standalone",  # a free local port for the rendezvous, chosen by torchrun
        "-m",
        "workshop_lessons.drills",
        "batch-size-rank",
        "--micro",
        str(micro),
        "--accum",
        str(accum),
        "--config-world-size",
        str(config_world),
    ]
    child_env = teardown.without_world()  # a caller's RANK, MASTER_PORT...: the launcher sets them afresh
    child_env |= {
        "DS_ACCELERATOR": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",  # torchrun's own default for several ranks, without its warning
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_PARENT), os.environ.get("PYTHONPATH")])),
    }
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        text = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)]
        tail = text[0][-1500:] + "\n" + text[1][-1500:]  # bytes even under text=True (subprocess.run's timeout)
        raise WorkshopError(
            f"The {nproc}-rank launch did not end within {timeout_s:.0f} s. Its output so far:\n{tail}",
            "run it again with a larger timeout_s (a first use JIT-builds DeepSpeed's CPU ops), "
            "or look for a stale lock in ~/.cache/torch_extensions.",
        ) from e
    # Each rank that gets there prints the same traceback, torch prefixing "[rank1]: "; keep DeepSpeed's line once
    lines = [re.sub(r"^\[rank\d+\]:\s*", "", ln).strip() for ln in p.stderr.splitlines()]
    errors = list(dict.fromkeys(ln for ln in lines if BATCH_ASSERTION in ln))
    ok_lines = [ln.strip() for ln in p.stdout.splitlines() if "deepspeed.initialize accepted" in ln]
    tail = f"{p.stdout[-1500:]}\n{p.stderr[-2500:]}"
    if fixed and p.returncode != 0:
        raise WorkshopError(
            f"The corrected config failed too (exit {p.returncode}). End of its output:\n{tail}",
            "read the ranks' error above; the batch sizes were micro x accum x world_size.",
        )
    if not fixed and (p.returncode == 0 or not errors):
        raise WorkshopError(
            f"The mismatched launch exited {p.returncode} without DeepSpeed's batch-size assertion. "
            f"End of its output:\n{tail}",
            "read the error above (a port in use, a missing op build); the drill needs DeepSpeed to "
            "reach its config check.",
        )
    if errors:
        # DeepSpeed's message ends "... world_size 16 != 4 * 4 * 2": its numbers, not ours, make the arithmetic.
        tb, mb, ga, ws = map(int, re.search(r"(\d+) != (\d+) \* (\d+) \* (\d+)", errors[-1]).groups())
        arithmetic = f"{tb} != {mb} x {ga} x {ws} = {mb * ga * ws}"
    else:
        arithmetic = f"{cfg['train_batch_size']} == {micro} x {accum} x {nproc}"
    return {
        "command": shlex.join(cmd),
        "returncode": p.returncode,
        "world_size": nproc,
        "config": {
            k: cfg[k] for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
        },
        "error_lines": errors,
        "arithmetic": arithmetic,
        "output_lines": ok_lines,
        "fixed_config": {
            "train_batch_size": micro * accum * nproc,
            "train_micro_batch_size_per_gpu": micro,
            "gradient_accumulation_steps": accum,
            "world_size": nproc,
        },
    }


# ---------------------------------------------------------------------------------------------- drill 2


def squad_batch(tokenizer, n: int = 4, max_length: int = 64) -> dict:
    """A padded batch of the first `n` SQuAD train prompts (`data.load_squad`) that fit in `max_length` tokens,
    loss on every token: {"input_ids", "attention_mask", "labels"}, [n, L] int64, L <= max_length (a multiple of 8)."""
    rows = [encode_example(r, tokenizer, max_length, loss_on="all") for r in load_squad("train", 4 * n, verbose=False)]
    feats = [{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows if r is not None][:n]
    return dict(make_collator(tokenizer)(feats))


def plant_massive_activation(
    model, batch: dict, value: float = 1e5, layer: int = 0, dim: int = 0, neuron: int = 0, gain: float = 100.0
) -> dict:
    """Give `model` (a Qwen3/Llama-style `*ForCausalLM` with a SwiGLU MLP, fp32) a massive activation, in place:
    `value` in feature `dim` of the residual stream after block `layer`, at the first token of `batch`'s prompts.

    Why this way: Sun et al. 2024 ("Massive Activations in Large Language Models", COLM 2024, arXiv 2402.17762)
    find in pretrained LLMs a few activations up to ~100,000 times the median, in fixed feature dimensions
    (LLaMA2-7B: 1415 and 2533), at the starting token and the first delimiter, nearly constant across inputs,
    written into the residual stream by an early block's MLP; the models use them as bias terms and attention
    sinks. bf16, with fp32's 8 exponent bits, holds them (up to ~3.4e38); fp16's 5 bits end at 65504, and an
    activation that crosses it becomes inf. Whether a given checkpoint's outliers cross it depends on the model;
    this tiny model was never pretrained and has none, so one is planted the way they arise: one MLP neuron of
    block `layer` is made to fire on the first token and to write into feature `dim` only:
    gate and up rows = gain x x0 / |x0|^2, where x0 is the MLP's input at the first token (the same in every
    prompt: they all begin "Question:", and causal attention at position 0 sees that token alone), so the neuron
    gives silu(gain) x gain ~ 10^4 there, and little where the input points elsewhere; its down-projection column
    = value / that, in feature `dim`, 0 elsewhere. Every weight stays ordinary-sized (|w| <= ~10, far inside
    fp16's range): in fp16 only the activation overflows, not the weights. The other 127 neurons are untouched.

    Returns:
        {"layer", "dim", "neuron", "max_abs_hidden" (largest |hidden state| after block `layer` on `batch`, fp32;
         ~= value), "median_abs_hidden", "times_median" (their ratio), "positions_over_fp16_max" (tokens of
         `batch` with an activation above 65504: the first of each prompt), "max_abs_weight" (largest |weight|
         of the model after planting), "fp16_max": 65504.0}
    """
    mlp = model.model.layers[layer].mlp
    seen = {}
    hook = mlp.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0].detach()))
    with torch.no_grad():
        model(**batch)
        hook.remove()
        x0 = seen["x"][0, 0]
        for proj in (mlp.gate_proj, mlp.up_proj):  # gate(x0) = up(x0) = gain
            proj.weight[neuron] = gain * x0 / x0.square().sum()
        fired = (mlp.act_fn(torch.tensor(gain)) * gain).item()  # the neuron's output on x0
        mlp.down_proj.weight[:, neuron] = 0.0
        mlp.down_proj.weight[dim, neuron] = value / fired
        hidden = model(**batch, output_hidden_states=True).hidden_states[layer + 1].abs()
    real = batch["attention_mask"].bool() if "attention_mask" in batch else torch.ones(hidden.shape[:2], dtype=bool)
    top, median = hidden.max().item(), hidden[real].median().item()
    return {
        "layer": layer,
        "dim": dim,
        "neuron": neuron,
        "max_abs_hidden": top,
        "median_abs_hidden": median,
        "times_median": top / median,
        "positions_over_fp16_max": int((hidden.amax(-1) > FP16_MAX).sum()),
        "max_abs_weight": max(p.abs().max().item() for p in model.parameters()),
        "fp16_max": FP16_MAX,
    }


def _train_engine(model, batch: dict, cfg: dict, precision: str, steps: int) -> list[dict]:
    """`steps` DeepSpeed engine steps on the same batch; one row per step. Stops at the step DeepSpeed's loss
    scaler raises (its text in "error")."""
    # DeepSpeed here, not at the top: importing it picks the accelerator and probes its ops; env settles both first
    import deepspeed

    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    batch = {k: v.to(engine.device) for k, v in batch.items()}
    rows = []
    for step in range(steps):
        # ZeRO's optimizer holds DeepSpeed's loss scaler: dynamic in fp16, a static 1 in bf16
        scale = float(getattr(engine.optimizer, "loss_scale", 1.0))
        skipped_before, error = engine.skipped_steps, ""
        loss = engine(**batch).loss
        engine.backward(loss)
        try:
            engine.step()
        except Exception as e:  # DeepSpeed raises a bare Exception at the minimum scale (loss_scaler.py)
            if AT_MINIMUM not in str(e):
                raise
            error = str(e)
        rows.append(
            {
                "precision": precision,
                "step": step,
                "loss": loss.item(),
                "overflow": bool(getattr(engine.optimizer, "overflow", False)),
                "loss_scale": scale,
                "skipped": bool(error) or engine.skipped_steps > skipped_before,
                "error": error,
            }
        )
        if error:
            break
    engine.destroy()
    return rows


def _fp16_by_hand(model, batch: dict, cfg: dict, steps: int) -> list[dict]:
    """The fp16 run without DeepSpeed's engine (for CPUs whose DeepSpeed accelerator refuses fp16): DeepSpeed's
    own `DynamicLossScaler` (deepspeed/runtime/fp16/loss_scaler.py, made by `CreateLossScaler` from the config's
    fp16 section as DeepSpeed parses it), fp16 weights for the forward and backward, fp32 master weights for
    AdamW, the step skipped on overflow: what ZeRO's optimizer does, in a dozen lines."""
    # DeepSpeed here, not at the top: importing it picks the accelerator and probes its ops; env settles both first
    import deepspeed
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.fp16.loss_scaler import CreateLossScaler
    from deepspeed.runtime.utils import has_inf_or_nan

    env.init_distributed()  # the world of one's group, on an in-process store (no port opened)
    deepspeed.init_distributed()  # as deepspeed.initialize would: the scaler asks DeepSpeed's comm for the rank
    f16 = DeepSpeedConfig(cfg).float16_config
    scaler = CreateLossScaler(torch.float16, f16.loss_scale, True, f16.dynamic_loss_scale_args())
    half = copy.deepcopy(model).half()
    master = list(model.parameters())  # fp32, updated by AdamW and copied into the fp16 working copy
    opt = torch.optim.AdamW(master, **cfg["optimizer"]["params"])
    rows = []
    for step in range(steps):
        scale, error = float(scaler.loss_scale), ""
        half.zero_grad(set_to_none=True)
        loss = half(**batch).loss
        scaler.backward(loss.float())  # loss x scale, then backward
        # DynamicLossScaler.has_overflow_serial itself fails in DeepSpeed 0.19.8 (its _has_inf_or_nan lacks
        # @staticmethod: "takes 1 positional argument but 2 were given"); the function it wraps works.
        overflow = any(p.grad is not None and has_inf_or_nan(p.grad) for p in half.parameters())
        try:
            scaler.update_scale(overflow)
        except Exception as e:
            if AT_MINIMUM not in str(e):
                raise
            error = str(e)
        if not overflow and not error:
            for p32, p16 in zip(master, half.parameters()):
                p32.grad = None if p16.grad is None else p16.grad.float() / scale
            torch.nn.utils.clip_grad_norm_(master, cfg["gradient_clipping"])
            opt.step()
            with torch.no_grad():
                for p32, p16 in zip(master, half.parameters()):
                    p16.copy_(p32)
        rows.append(
            {
                "precision": "fp16",
                "step": step,
                "loss": loss.item(),
                "overflow": overflow,
                "loss_scale": scale,
                "skipped": overflow or bool(error),
                "error": error,
            }
        )
        if error:
            break
    return rows


def fp16_overflow(
    steps: int = 20,
    massive_activation: float | None = 1e5,
    zero_stage: int = 2,
    micro_batch: int = 4,
    max_length: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    route: str = "auto",
) -> pd.DataFrame:
    """Train the tiny model, with a massive activation planted (`plant_massive_activation`, |value| above fp16's
    65504), for `steps` steps on one batch of SQuAD prompts in fp16 with DeepSpeed's dynamic loss scaling, and
    the same steps in bf16; one row per step.

    In fp16 the planted activation becomes inf in the forward pass, the loss NaN, every gradient NaN: each step
    overflows, DeepSpeed skips it and halves the loss scale (after `hysteresis` = 2 overflows have been forgiven),
    from 2^initial_scale_power = 65536 down to min_loss_scale = 1, where its `DynamicLossScaler.update_scale`
    raises "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run." (step 17 with
    these defaults). Lowering the scale cannot help: the overflow is in the activations, not the gradients. bf16
    has fp32's range: finite losses, no scaling. `massive_activation=None`: the model as built (fp16 then trains).

    Route (recorded in `df.attrs["route"]`): "engine" = a real DeepSpeed engine (ZeRO `zero_stage`, whose
    optimizer drives `DynamicLossScaler`, deepspeed/runtime/zero/stage_1_and_2.py) with fp16 enabled, possible
    where DeepSpeed's accelerator supports fp16 (`get_accelerator().is_fp16_supported()`; on the CPU: oneDNN fp16,
    e.g. AVX512-FP16 or AMX); "scaler" = the same `DynamicLossScaler` driven by hand (`_fp16_by_hand`), for CPUs
    where DeepSpeed's engine refuses fp16 ("Type fp16 is not supported on your device."). "auto" picks the
    engine where it can. bf16 always runs on the engine (DeepSpeed's CPU accelerator supports it everywhere).
    Note that ZeRO stage 0's fused `FP16_Optimizer` (deepspeed/runtime/fp16/fused_optimizer.py, `_update_scale`)
    halves the scale without hysteresis and never raises: at scale 1 it would go on skipping every step silently.

    Args:
        steps: optimizer steps per precision (the fp16 run stops earlier where DeepSpeed raises).
        massive_activation: the planted |activation|, or None for none.
        zero_stage: 1 or 2 (the stages whose optimizer uses `DynamicLossScaler`) for the engine route.
        micro_batch, max_length: SQuAD prompts per step and tokens per prompt at most.
        lr: AdamW learning rate.

    Returns:
        DataFrame, one row per (precision, step): precision ("fp16", "bf16"), step (0-based), loss (nats per
        token; NaN where the forward overflowed), overflow (DeepSpeed found inf/NaN gradients), loss_scale (the
        factor this step's loss was multiplied by before backward; 1.0 in bf16), skipped (no weight update),
        error (DeepSpeed's exception text on the step it raised, else ""). `df.attrs`: "route", "accelerator" (DeepSpeed's
        accelerator's name), "fp16_supported" (its `is_fp16_supported()`, which picked the "auto" route),
        "massive_activation" (`plant_massive_activation`'s dict or None), "fp16_error" (the exception text or
        None), "fp16_config" (the config's fp16 section).

    Raises:
        WorkshopError: zero_stage not 1 or 2, an unknown route, or route "engine" where DeepSpeed refuses fp16.
    """
    if zero_stage not in (1, 2):
        raise WorkshopError(
            f"zero_stage must be 1 or 2 here, got {zero_stage!r}: their optimizer drives "
            "DynamicLossScaler (stage 0's FP16_Optimizer has no hysteresis and never raises).",
            "pass zero_stage=1 or 2.",
        )
    if route not in ("auto", "engine", "scaler"):
        raise WorkshopError(f"Unknown route {route!r}.", "use auto, engine or scaler.")
    # DeepSpeed needs RANK, MASTER_PORT... in one process, but a MASTER_PORT left in os.environ would reach every
    # later subprocess: the world of one for the duration only (`teardown.restored_world`)
    with teardown.restored_world():
        env.ensure_distributed_env()
        env.init_distributed()  # its group on an in-process store: DeepSpeed binds no MASTER_PORT
        from deepspeed.accelerator import get_accelerator

        env.quiet_libraries()
        acc = get_accelerator()
        supported = acc.is_fp16_supported()
        if route == "engine" and not supported:
            raise WorkshopError(
                f"DeepSpeed's {acc._name} accelerator does not support fp16 here "
                "(get_accelerator().is_fp16_supported() is False).",
                "use route='scaler' or 'auto'.",
            )
        use = route if route != "auto" else ("engine" if supported else "scaler")
        torch.manual_seed(seed)
        model, tok, info = load_model_and_tokenizer(tiny=True)
        batch = squad_batch(tok, micro_batch, max_length)
        planted = None if massive_activation is None else plant_massive_activation(model, batch, massive_activation)
        rows, fp16_cfg = [], None
        for precision in ("fp16", "bf16"):
            cfg = _resolve_auto(
                build_ds_config(
                    f"stage{zero_stage}",
                    Settings(
                        precision=precision,
                        train_micro_batch_size_per_gpu=len(batch["input_ids"]),
                        gradient_accumulation_steps=1,
                        world_size=1,
                    ),
                ),
                info["num_params"],
                lr,
            )
            net = copy.deepcopy(model)  # the engine casts its module in place; both runs start alike
            if precision == "fp16":
                fp16_cfg = cfg["fp16"]
                rows += (
                    _train_engine(net, batch, cfg, precision, steps)
                    if use == "engine"
                    else _fp16_by_hand(net, batch, cfg, steps)
                )
            else:
                rows += _train_engine(net, batch, cfg, precision, steps)
    df = pd.DataFrame(rows)
    errors = [e for e in df["error"] if e]
    df.attrs.update(
        route=use,
        accelerator=acc._name,
        fp16_supported=supported,
        massive_activation=planted,
        fp16_config=fp16_cfg,
        fp16_error=errors[0] if errors else None,
    )
    return df


def plot_fp16_overflow(df: pd.DataFrame, ax=None):
    """The loss scale (log2 axis, the factor the loss is multiplied by before backward) per optimizer step of
    each precision in `df` (from `fp16_overflow`): fp16's halving down to min_loss_scale, bf16's constant 1
    (no scaling); overflowed steps marked x, the step where DeepSpeed gave up marked with its message.
    Returns the matplotlib Axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    for precision, g in df.groupby("precision", sort=False):
        unscaled = " (1: no scaling)" if (g["loss_scale"] == 1).all() else ""
        (line,) = ax.plot(g["step"], g["loss_scale"], "-o", ms=3, label=f"{precision} loss scale{unscaled}")
        over = g[g["overflow"]]
        if len(over):
            ax.plot(
                over["step"],
                over["loss_scale"],
                "x",
                color=line.get_color(),
                ms=8,
                label=f"{precision}: gradients overflowed (step skipped)",
            )
        for _, r in g[g["error"] != ""].iterrows():
            ax.annotate(
                "DeepSpeed raised:\n" + r["error"].split(" - ")[0],
                (r["step"], r["loss_scale"]),
                xytext=(-110, 18),
                textcoords="offset points",
                ha="right",
                va="bottom",
                fontsize=7,
                arrowprops={"arrowstyle": "->", "lw": 0.6},
            )
    ax.set_yscale("log", base=2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="optimizer step",
        ylabel="loss scale (multiplier, log2 scale)",
        title="Dynamic loss scaling with an activation above fp16's 65,504",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return ax


if __name__ == "__main__":
    raise SystemExit(_batch_size_rank(sys.argv[1:]))
