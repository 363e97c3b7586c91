"""Fixed shapes for issue 42: packed sequences. Every micro-batch is one row of exactly `max_tokens` tokens: whole
questions laid end to end, each with its own position ids (0, 1, ... from its first token), then padding whose
position ids are all 0. No attention mask: transformers reads the documents from where the position ids restart
(`masking_utils.find_packed_sequence_indices`, when the model keeps no KV cache, as under the Trainer) and, with
`attn_implementation="flex_attention"`, builds a block-sparse causal mask inside each document (PyTorch's
FlexAttention), so no question attends to another and the attention costs what the questions' own lengths cost.
Each padding token is a document of its own: as one document, the 24k padding tokens of an epoch's last row
attended causally among themselves and made that step 3x longer (lab/findings/h100/bench-packed). On a CPU, whose
FlexAttention has no backward (torch 2.13), SDPA with the same mask made dense: exact, and slow. Every micro-batch
has one shape, [1, max_tokens], so the blocks are compiled for it alone (static shapes).

`packed()` makes `workshop_lib.train.run_experiment` (and so a `lab.bench` row) train this way, for an A/B against
the token-budget batches of the default recipe; `lab.bench.ceiling(packed=True)` is the plain loop's. Tested for the
same loss and gradients as the padded batches in lab/tests/test_packing.py.
"""

from __future__ import annotations

import random
from contextlib import contextmanager

import torch

from workshop_lib import model, train
from workshop_lib.data import TokenBudgetBatchSampler, labelled_positions_of

ATTENTION = "flex_attention" if torch.cuda.is_available() else "sdpa"


class PackedBatchSampler(TokenBudgetBatchSampler):
    """Micro-batches of whole sequences whose lengths add up to at most `max_tokens` (one packed row each): the
    indices shuffled with `seed` and cut in that order, so a row holds questions of every length, as many as fit
    (the row's unused end is padding: at most one question's length). The epochs' order, `per_step` groups and
    `set_epoch` are `TokenBudgetBatchSampler`'s.

    Args:
        lengths: tokens of each sequence (L_i, each at most `max_tokens`); max_tokens: tokens per row; seed: as
            TrainingArguments.seed; per_step: micro-batches per optimizer step, all ranks.

    Raises:
        ValueError: a sequence longer than `max_tokens`."""

    def __init__(self, lengths: list[int], max_tokens: int, seed: int = 42, per_step: int = 1):
        if max(lengths, default=0) > max_tokens:
            raise ValueError(
                f"A sequence of {max(lengths)} tokens does not fit a packed row of {max_tokens}. "
                "To fix: raise --max-tokens-per-micro-batch to at least --max-length."
            )
        self.seed, self.epoch, self.per_step = seed, 0, per_step
        order = list(range(len(lengths)))
        random.Random(seed).shuffle(order)
        self.batches, used = [[]], 0
        for i in order:
            if used + lengths[i] > max_tokens:
                self.batches.append([])
                used = 0
            self.batches[-1].append(i)
            used += lengths[i]

    @classmethod
    def for_dataset(cls, ds, max_tokens: int, seed: int, per_step: int = 1) -> PackedBatchSampler:
        return cls([len(x) for x in ds["input_ids"]], max_tokens, seed, per_step)


def pack_collator(pad_token_id: int, row_tokens: int, labelled_positions: bool = False):
    """A collator that lays a batch's sequences end to end in one row of `row_tokens` tokens (more, rounded up to a
    multiple of 8, for a batch that does not fit: an evaluation batch of long questions). Returns {"input_ids",
    "labels", "position_ids"}: [1, T] int64; the labels are the sequences' own with each sequence's first one set to
    -100 (the token before it is another question's: the loss, which shifts by one, never predicts across a
    boundary; a question's first token carries no label in the padded batches either), -100 on the padding; the
    position ids restart at 0 at each sequence and are 0 on every padding token (a document of one token each).
    With `labelled_positions`, the key `data.make_collator` adds."""

    def collate(features):
        ids, labels, positions = [], [], []
        for f in features:
            n = len(f["input_ids"])
            ids += f["input_ids"]
            labels += [-100, *f["labels"][1:]]
            positions += range(n)
        pad = max(row_tokens, -(-len(ids) // 8) * 8) - len(ids)
        batch = {
            "input_ids": torch.tensor([ids + [pad_token_id] * pad]),
            "labels": torch.tensor([labels + [-100] * pad]),
            "position_ids": torch.tensor([positions + [0] * pad]),
        }
        if labelled_positions:
            batch["labelled_positions"] = labelled_positions_of(batch["labels"])
        return batch

    return collate


def compile_layers_static(net) -> int:
    """`model.compile_layers` without marking the sequences and length dynamic: one graph for the one shape."""
    names = set(getattr(net, "_no_split_modules", None) or [])
    blocks = [m for m in net.modules() if type(m).__name__ in names]
    for block in blocks:
        block.compile()
    return len(blocks)


@contextmanager
def packed():
    """Within the block, `train.run_experiment` trains on packed rows: `PackedBatchSampler` for the token-budget
    sampler (its `max_tokens_per_micro_batch` the row's length), `pack_collator` for the collator, the model built
    with `ATTENTION`, its blocks compiled for static shapes. Restored on exit."""
    saved = train.token_budget_batches, train.make_collator, train.load_model_and_tokenizer, train.compile_layers
    row = {}

    def batches(cfg, train_ds, world_size=1):
        row["tokens"] = cfg.max_tokens_per_micro_batch
        return PackedBatchSampler.for_dataset(
            train_ds, cfg.max_tokens_per_micro_batch, cfg.seed, world_size * cfg.gradient_accumulation_steps
        )

    def collator(tokenizer, padding="longest", max_length=512, attention_mask=True, labelled_positions=False):
        return pack_collator(tokenizer.pad_token_id, row["tokens"], labelled_positions)

    def load(*args, **kwargs):
        return model.load_model_and_tokenizer(*args, **kwargs | {"attn_implementation": ATTENTION})

    train.token_budget_batches, train.make_collator, train.load_model_and_tokenizer = batches, collator, load
    train.compile_layers = compile_layers_static
    try:
        yield
    finally:
        train.token_budget_batches, train.make_collator, train.load_model_and_tokenizer, train.compile_layers = saved
