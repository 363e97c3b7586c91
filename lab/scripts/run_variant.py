"""`workshop run` with one of the engine's choices undone or changed, for an A/B against the engine as it is
(workshop_lessons/reference/h200/x2-2026-11-26/README.md). Started as `workshop run` is, under torchrun for several ranks:

    torchrun --standalone --nproc_per_node 2 lab/scripts/run_variant.py unbalanced run stage2 --random-weights ...

Variants:
    unbalanced: token-budget batches dealt to the ranks in a random order (the engine before 2026-11-26), not in
        groups of one shape per step (`TokenBudgetBatchSampler`'s per_step);
    dynamic: the transformer blocks compiled with dynamic shapes from the first step (`torch.compile(dynamic=True)`),
        not after the first new shape.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from workshop_lib import cli, model, train  # noqa: E402
from workshop_lib.data import TokenBudgetBatchSampler  # noqa: E402


def unbalanced():
    build = TokenBudgetBatchSampler.for_dataset.__func__
    TokenBudgetBatchSampler.for_dataset = classmethod(
        lambda cls, ds, tokens, seed, per_step=1: build(cls, ds, tokens, seed)
    )


def dynamic():
    def compile_layers(net) -> int:
        names = set(getattr(net, "_no_split_modules", None) or [])
        blocks = [m for m in net.modules() if type(m).__name__ in names]
        for block in blocks:
            block.compile(dynamic=True)
        return len(blocks)

    model.compile_layers = train.compile_layers = compile_layers


if __name__ == "__main__":
    {"unbalanced": unbalanced, "dynamic": dynamic}[sys.argv[1]]()
    sys.exit(cli.main(sys.argv[2:]))
