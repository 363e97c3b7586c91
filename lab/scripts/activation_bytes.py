"""Activation memory of one Qwen3 block per token, measured on a GPU, for `fit.qwen3_constants` to be checked
against (tests/test_docs.py reads the file this writes; lab/findings/h100/activations holds the H100's).

    python lab/scripts/activation_bytes.py OUT.json [--models Qwen/Qwen3-4B Qwen/Qwen3-8B] [--seq 4096] [--variants ...]

For each model and attention kernel (sdpa, eager, and sdpa with each block compiled as the default recipe
does, `model.compile_layers`): the architecture with 1 and with 3 layers, random bf16 weights on the GPU; the
memory the base model's forward pass of one sequence of `seq` tokens leaves allocated (the tensors kept for the
backward pass), on its second pass (the first compiles). A block keeps (3 layers - 1 layer) / 2 of it; C is that
in bytes / (seq x hidden_size), the constant of eq. 1 of Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (`fit.layer_activation_bytes`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workshop_lib.fit import model_shape, qwen3_constants  # noqa: E402
from workshop_lib.model import architecture_config, compile_layers  # noqa: E402
from workshop_lib.units import MiB  # noqa: E402

VARIANTS = {"sdpa": ("sdpa", False), "eager": ("eager", False), "sdpa, compiled blocks": ("sdpa", True)}


def kept_bytes(model: str, layers: int, attn: str, compiled: bool, seq: int) -> int:
    """Bytes the base model's forward pass over [1, seq] random tokens leaves allocated, with `layers` blocks."""
    from transformers import AutoModelForCausalLM

    cfg = architecture_config(model)
    cfg.num_hidden_layers = layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:layers]
    with torch.device("cuda"):  # initialised on the GPU: seconds, where the CPU takes a minute for 8B's embeddings
        net = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=attn)
    if compiled:
        compile_layers(net)
    ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")
    for _ in range(2):  # the second pass is measured: the first compiles
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        out = net.model(input_ids=ids, use_cache=False).last_hidden_state
        torch.cuda.synchronize()
        kept = torch.cuda.memory_allocated() - before
        del out
    del net
    torch.cuda.empty_cache()
    return kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--models", nargs="+", default=["Qwen/Qwen3-4B", "Qwen/Qwen3-8B"])
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    a = p.parse_args()
    import transformers

    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seq": a.seq,
        "models": {},
    }
    for model in a.models:
        h = model_shape(model)["hidden_size"]
        rows = {}
        for name in a.variants:
            attn, compiled = VARIANTS[name]
            one, three = (kept_bytes(model, n, attn, compiled, a.seq) for n in (1, 3))
            per_layer = (three - one) / 2
            rows[name] = {"bytes_per_layer": per_layer, "C": per_layer / (a.seq * h)}
            print(f"{model} {name}: {per_layer / MiB:,.1f} MiB per block, C = {rows[name]['C']:.2f}", flush=True)
        rows["estimate C (flash attention)"] = qwen3_constants(model_shape(model), flash_attention=True)[0]
        result["models"][model] = rows
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
