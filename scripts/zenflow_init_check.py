"""Does DeepSpeed's ZenFlow change the model at engine start? A minimal reproducer, on the CPU (issue 26), to report
upstream (https://github.com/deepspeedai/DeepSpeed/issues; notebook 03e says what to attach).

The tiny Qwen3 (fp32, random weights, seed 0) goes through `deepspeed.initialize` with the workshop's ZeRO-2 + CPU
offload config, without and with ZenFlow (`ds_config.ZENFLOW`); before any step, each weight the engine's module
holds is compared with the weight it was given (W), and the loss of one batch is printed. DeepSpeed 0.19.7 and
0.19.8 hand back each 2-D weight as `W.T.reshape(shape)`: `_update_model_bit16_weights`
(deepspeed/runtime/zero/stage_1_and_2.py, line 894 in 0.19.8) views ZenFlow's column-major flat buffer with
`narrow(...).view(shape)` instead of ZenFlow's transposing `unflatten`. Usage:

    python scripts/zenflow_init_check.py > lab/findings/h100/zenflow/init_check.txt
"""

import copy

import deepspeed
import torch

from workshop_lib import env
from workshop_lib.ds_config import Settings, build_ds_config
from workshop_lib.model import load_model_and_tokenizer


def main():
    env.ensure_distributed_env()
    print(f"deepspeed {deepspeed.__version__}, torch {torch.__version__}")
    x = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    for zenflow in (False, True):
        torch.manual_seed(0)
        net, _, _ = load_model_and_tokenizer("Qwen/Qwen3-0.6B", tiny=True, random_weights=True)
        before = copy.deepcopy(net.state_dict())
        cfg = build_ds_config(
            "stage2_zenflow" if zenflow else "stage2_offload",
            Settings(precision="fp32", train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1, world_size=1),
        )
        cfg["optimizer"]["params"] = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}
        cfg["gradient_clipping"], cfg["zero_optimization"]["reduce_bucket_size"] = 1.0, 10**6
        engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
        after = engine.module.state_dict()
        changed = [k for k in before if not torch.equal(before[k].float(), after[k].float())]
        print(
            f"ZenFlow {zenflow}: {len(changed)} of {len(before)} tensors changed by deepspeed.initialize; "
            f"loss of one batch before any step {engine(input_ids=x, labels=x).loss.item():.4f}"
        )
        for k in changed:
            a, b = before[k].float(), after[k].float()
            permuted = torch.equal(a.flatten().sort().values, b.flatten().sort().values)
            scrambled = a.dim() == 2 and torch.equal(a.t().reshape(a.shape), b)  # the flat buffer's column-major order
            print(f"  {k} {tuple(a.shape)}: same values permuted {permuted}, equal to W.T.reshape(shape) {scrambled}")


if __name__ == "__main__":
    main()
