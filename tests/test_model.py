import pytest
import torch

from workshop_lib.errors import WorkshopError
from workshop_lib.model import count_params, load_model_and_tokenizer


def test_shipped_architectures_have_the_published_sizes():
    assert count_params("Qwen/Qwen3-0.6B")["num_params"] == 596_049_920
    assert count_params("bigscience/bloom-560m")["num_params"] == 559_214_592


@pytest.mark.parametrize(
    "name, family", [("Qwen/Qwen3-0.6B", "Qwen3ForCausalLM"), ("bigscience/bloom-560m", "BloomForCausalLM")]
)
def test_tiny_model_is_the_same_family(name, family):
    model, tok, info = load_model_and_tokenizer(name, tiny=True)
    assert type(model).__name__ == family
    assert info["num_params"] < 1_000_000 and model.config.vocab_size == len(tok)
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # fp32 master weights, not the config's bf16


def test_model_not_cached_offline_names_the_fix():
    with pytest.raises(WorkshopError, match="--random-weights"):
        load_model_and_tokenizer("no-such-org/no-such-model")


@pytest.mark.parametrize("name", ["Qwen/Qwen3-0.6B", "bigscience/bloom-560m"])
def test_logits_where_labelled_give_the_same_loss_and_gradients(name):
    """Answer-only labels: the loss (mean, and sum / num_items_in_batch as the Trainer asks) and every
    gradient equal the full-logits forward's, with the positions from the collator or found on the fly;
    without labels (generate) the model's own forward runs."""
    from workshop_lib.data import load_squad, make_collator, tokenize_squad
    from workshop_lib.model import compute_logits_where_labelled

    model, tok, _ = load_model_and_tokenizer(name, tiny=True)
    ds, stats = tokenize_squad(load_squad("train", 6, verbose=False), tok)
    batch = make_collator(tok, labelled_positions=True)([ds[i] for i in range(6)])
    positions = batch.pop("labelled_positions")
    assert len(positions) == (batch["labels"][:, 1:] != -100).sum() == stats.labelled_tokens
    n = torch.tensor(len(positions))

    def loss_and_grads(**kw):
        model.zero_grad()
        loss = model(**batch, **kw).loss
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    full = [loss_and_grads(), loss_and_grads(num_items_in_batch=n)]
    logits_all = model(input_ids=batch["input_ids"]).logits
    compute_logits_where_labelled(model)
    for kw, (loss, grads) in zip([{}, {"num_items_in_batch": n}], full):
        for extra in ({}, {"labelled_positions": positions}):
            loss2, grads2 = loss_and_grads(**kw, **extra)
            assert torch.allclose(loss, loss2, atol=1e-6)
            assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads, grads2))
    assert torch.equal(model(input_ids=batch["input_ids"]).logits, logits_all)  # no labels: the whole [B, L, V]


def test_a_config_only_directory_with_random_weights_gets_a_real_tokenizer(tmp_path):
    """A directory with only a config.json (an architecture to try, random weights): transformers 5 builds an empty
    tokenizer from it rather than raising, which would make every example one token; the workshop's own BPE
    tokenizer is used instead."""
    from workshop_lib.model import check_model_fits_data, check_model_source, tiny_config

    tiny_config("Qwen/Qwen3-0.6B", 4096).save_pretrained(tmp_path)
    check_model_source(str(tmp_path), random_weights=True)
    net, tok, _ = load_model_and_tokenizer(str(tmp_path), random_weights=True)
    with pytest.raises(WorkshopError, match="embedding has 4,096 rows"):  # the local tokenizer's ids out of range
        check_model_fits_data(net, tok, 64, str(tmp_path))
    tiny_config("Qwen/Qwen3-0.6B", 32_000).save_pretrained(tmp_path)
    check_model_source(str(tmp_path), random_weights=True)
    _, tok, info = load_model_and_tokenizer(str(tmp_path), random_weights=True)
    assert info["tokenizer"] == "local BPE" and len(tok("Question: Who wrote Hamlet?").input_ids) > 3


def test_a_damaged_tokenizer_cache_is_trained_again(tmp_path, monkeypatch, capsys):
    """The tiny model's tokenizer, cached by the workshop (WORKSHOP_CACHE), cut short: trained again with one line
    saying so, the same tokenizer as before."""
    from workshop_lib import model

    monkeypatch.setattr(model, "CACHE_DIR", tmp_path)
    first = model.local_tokenizer(vocab_size=600)
    cached = tmp_path / "squad-bpe-600" / "tokenizer.json"
    cached.write_text(cached.read_text()[:100])
    again = model.local_tokenizer(vocab_size=600)
    assert "cannot be read" in capsys.readouterr().out
    assert again("Question: Who?")["input_ids"] == first("Question: Who?")["input_ids"]
    (tmp_path / "afile").write_text("mine")  # WORKSHOP_CACHE naming a file: one message, the file untouched
    monkeypatch.setattr(model, "CACHE_DIR", tmp_path / "afile")
    with pytest.raises(
        WorkshopError, match=r"(?s)WORKSHOP_CACHE .*afile.*cannot be written.*To fix: pass WORKSHOP_CACHE"
    ):
        model.local_tokenizer(vocab_size=600)
    assert (tmp_path / "afile").read_text() == "mine"
