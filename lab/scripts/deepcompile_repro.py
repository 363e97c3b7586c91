"""DeepCompile through the plain HF Trainer, as small as it gets: a minimal reproducer, no workshop code.

    python lab/scripts/deepcompile_repro.py [--model Qwen/Qwen3-0.6B] [--steps 8] [--trainer-compile]

Qwen3 with random bf16 weights (the shipped config), ZeRO-3 with `"compile": {"deepcompile": true}`, batches
of random tokens (4 x 512). Without --trainer-compile, only the DeepSpeed key is set. With it, the Trainer's
own `torch_compile=True` is set as well, through which accelerate calls DeepSpeed's `engine.compile()`, what
DeepCompile needs to run. Prints the versions, whether DeepSpeed's engine reports DeepCompile active, each step's
wall time, and the exception if one ends the run (exit status 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workshop_lib.model import architecture_config  # noqa: E402  (the shipped config: no hub needed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="Qwen/Qwen3-0.6B")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--trainer-compile", action="store_true")
    a = p.parse_args()
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29517",
    }.items():
        os.environ.setdefault(k, v)
    import deepspeed
    import transformers
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, deepspeed {deepspeed.__version__}, "
        f"{torch.cuda.get_device_name()}",
        flush=True,
    )
    cfg = architecture_config(a.model)
    net = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    ids = torch.randint(0, cfg.vocab_size, (4 * a.steps, 512))
    data = [{"input_ids": row, "labels": row} for row in ids]
    ds = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3},
        "compile": {"deepcompile": True},
    }

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            engine = trainer.model_wrapped
            active = getattr(engine, "is_deepcompile_active", lambda: None)()
            print(
                f"step {state.global_step}: {time.perf_counter() - self.t:.3f} s, deepcompile active: {active}",
                flush=True,
            )

    args = TrainingArguments(
        output_dir="/tmp/deepcompile_repro",
        per_device_train_batch_size=4,
        max_steps=a.steps,
        bf16=True,
        deepspeed=ds,
        torch_compile=a.trainer_compile,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = Trainer(model=net, args=args, train_dataset=data, callbacks=[Steps()])
    try:
        trainer.train()
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
