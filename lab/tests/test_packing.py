"""Packed rows (lab/packing.py) on the CPU with the tiny Qwen3: the same loss and gradients as the padded batches of
the default recipe, every question once per pass, and the padding no question attends to."""

import pytest
import torch
from transformers.masking_utils import find_packed_sequence_indices

from lab.packing import PackedBatchSampler, pack_collator
from workshop_lib.data import load_squad, make_collator, tokenize_squad
from workshop_lib.model import load_model_and_tokenizer


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    net, tok, _ = load_model_and_tokenizer("Qwen/Qwen3-0.6B", tiny=True, attn_implementation="sdpa")
    ds, _ = tokenize_squad(load_squad("train", 64), tok, 512, "answer")
    return net.train(), tok, ds


def loss_and_grads(net, batch):
    net.zero_grad(set_to_none=True)
    loss = net(**batch, use_cache=False).loss  # as under the Trainer: no KV cache, so the documents are read
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in net.named_parameters()}


def test_a_packed_row_gives_the_padded_batchs_loss_and_gradients(tiny):
    net, tok, ds = tiny
    features = [ds[i] for i in range(12)]
    padded = make_collator(tok, attention_mask=False)(features)  # the default recipe's batch: [12, L]
    packed = pack_collator(tok.pad_token_id, 4096, labelled_positions=False)(features)
    lengths = [len(f["input_ids"]) for f in features]
    assert {k: v.shape for k, v in packed.items()} == {k: (1, 4096) for k in ("input_ids", "labels", "position_ids")}
    # one document per question, then each padding token one of its own
    documents = find_packed_sequence_indices(packed["position_ids"])
    assert documents.unique().numel() == len(features) + 4096 - sum(lengths)
    loss, grads = loss_and_grads(net, padded)
    packed_loss, packed_grads = loss_and_grads(net, packed)  # SDPA with the documents' mask (FlexAttention's on a GPU)
    assert packed_loss == pytest.approx(loss, rel=1e-6)
    for name, g in grads.items():
        torch.testing.assert_close(packed_grads[name], g, rtol=1e-4, atol=1e-7, msg=name)
    net.config._attn_implementation = "flex_attention"  # the GPU's attention: its forward pass runs on a CPU
    try:
        with torch.no_grad():
            assert net(**packed, use_cache=False).loss.item() == pytest.approx(loss, rel=1e-6)
    finally:
        net.config._attn_implementation = "sdpa"
    # a question attending to the one before it would change the loss: the same row read as one document
    with torch.no_grad():
        one = net(input_ids=packed["input_ids"], labels=packed["labels"], use_cache=False).loss.item()
    assert one != pytest.approx(loss, rel=1e-5)  # 100 times the tolerance above


def test_packed_rows_hold_every_question_once_and_fit(tiny):
    _, _, ds = tiny
    lengths = [len(x) for x in ds["input_ids"]]
    sampler = PackedBatchSampler(lengths, 2048, seed=42, per_step=2)
    first, second = list(sampler), list(sampler)  # two passes (epochs)
    for rows in (first, second):
        assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
        assert all(sum(lengths[i] for i in row) <= 2048 for row in rows)
    assert sorted(map(tuple, first)) == sorted(map(tuple, second)) and first != second  # same rows, new order
    with pytest.raises(ValueError, match="To fix: raise --max-tokens-per-micro-batch"):
        PackedBatchSampler(lengths, max(lengths) - 1)
