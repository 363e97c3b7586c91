import pytest
import torch

from workshop_lib.errors import WorkshopError
from workshop_lib.model import count_params, load_model_and_tokenizer


def test_shipped_architectures_have_the_published_sizes():
    assert count_params("Qwen/Qwen3-0.6B")["num_params"] == 596_049_920
    assert count_params("bigscience/bloom-560m")["num_params"] == 559_214_592


@pytest.mark.parametrize("name, family", [("Qwen/Qwen3-0.6B", "Qwen3ForCausalLM"),
                                          ("bigscience/bloom-560m", "BloomForCausalLM")])
def test_tiny_model_is_the_same_family(name, family):
    model, tok, info = load_model_and_tokenizer(name, tiny=True)
    assert type(model).__name__ == family
    assert info["num_params"] < 1_000_000 and model.config.vocab_size == len(tok)
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # fp32 master weights, not the config's bf16


def test_model_not_cached_offline_names_the_fix():
    with pytest.raises(WorkshopError, match="--random-weights"):
        load_model_and_tokenizer("no-such-org/no-such-model")
