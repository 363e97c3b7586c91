"""Models and tokenizers: from the hub, with random weights, or tiny (introduced in `00_setup`).

Three ways to get a causal LM, one function (`load_model_and_tokenizer`):
- a Hugging Face model by name or local path: weights and tokenizer from the hub or its cache (`hf download`);
- `random_weights=True`: the published architecture (shipped in `configs/models/` for the supported models,
  so no hub is needed) with random weights: the real shape for memory and speed measurements;
- `tiny=True`: the same family shrunk to about 0.35M parameters, for tests and CPU-only learners.

Where the real tokenizer is not available offline, a byte-level BPE tokenizer is trained in seconds on the
bundled SQuAD text (`local_tokenizer`) and cached under ~/.cache/workshop_lib."""

from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from huggingface_hub import try_to_load_from_cache
from tokenizers import ByteLevelBPETokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from . import variables
from .data import BUNDLED_FILES, labelled_positions_of
from .errors import WorkshopError, read_json_object
from .hub import hub_reachable
from .rundir import atomic_path, check_writable

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
CLASSIC_MODEL = "bigscience/bloom-560m"  # the original workshop's model
CONFIG_DIR = Path(__file__).parent / "configs" / "models"
SHIPPED_CONFIGS = {
    **{f"Qwen/Qwen3-{s}": CONFIG_DIR / f"Qwen3-{s}.json" for s in ("0.6B", "1.7B", "4B", "8B")},
    "bigscience/bloom-560m": CONFIG_DIR / "bloom-560m.json",
}
TINY_VOCAB, LOCAL_VOCAB = 4096, 32000
# Tiny dims: 2 layers x 64 wide, 4 heads of 16; about 0.35M parameters with a 4096-token vocabulary.
TINY_DIMS = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "head_dim": 16,
    "max_position_embeddings": 1024,
}
CACHE_DIR = Path(variables.get("WORKSHOP_CACHE", Path.home() / ".cache" / "workshop_lib"))


def local_tokenizer(vocab_size: int = TINY_VOCAB):
    """A byte-level BPE tokenizer trained on the bundled SQuAD train text (cached after the first call).

    Returns a `PreTrainedTokenizerFast` with eos "<|endoftext|>" and pad "<|pad|>", `vocab_size` entries. A cached
    copy that cannot be read is trained again (the cache, WORKSHOP_CACHE, is the workshop's own); WorkshopError
    where that cache cannot be written."""
    path = CACHE_DIR / f"squad-bpe-{vocab_size}"
    if (path / "tokenizer.json").exists():
        try:
            return PreTrainedTokenizerFast.from_pretrained(path)
        except Exception as e:  # noqa: BLE001 - a damaged cache (a file cut short or edited): the workshop's own
            print(f"The cached tokenizer in {path} cannot be read ({type(e).__name__}); training it again.")
            shutil.rmtree(path, ignore_errors=True)
    if not (path / "tokenizer.json").exists():
        check_writable(path, "WORKSHOP_CACHE")  # before training: a file there, or a folder not the user's
        squad = json.loads(BUNDLED_FILES["train"].read_text())
        texts = [p["context"] for a in squad["data"] for p in a["paragraphs"]]
        texts += [q["question"] for a in squad["data"] for p in a["paragraphs"] for q in p["qas"]]
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            texts, vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"], show_progress=False
        )
        tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", pad_token="<|pad|>")
        path.parent.mkdir(parents=True, exist_ok=True)
        # atomic: no rank reads a half-written tokenizer; one that loses the race keeps the winner's, identical copy
        with atomic_path(path, raced_ok=True) as tmp:
            tok.save_pretrained(tmp)
    return PreTrainedTokenizerFast.from_pretrained(path)


def architecture_config(model_name: str):
    """The model's `PretrainedConfig`: the shipped copy for supported models, else from the hub or cache.

    Raises:
        WorkshopError: the model is not supported offline and its config is not cached."""
    if model_name in SHIPPED_CONFIGS:
        d = json.loads(SHIPPED_CONFIGS[model_name].read_text())
        d = {k: v for k, v in d.items() if not k.startswith("_")}
        return AutoConfig.for_model(d.pop("model_type"), **d)
    try:
        return AutoConfig.from_pretrained(model_name, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise _not_cached(model_name) from e


def tiny_config(model_name: str, vocab_size: int):
    """The config of `model_name` shrunk to `TINY_DIMS`, same family (e.g. Qwen3 stays Qwen3)."""
    cfg = architecture_config(model_name)
    for k, v in TINY_DIMS.items():
        if hasattr(cfg, k) or k in getattr(cfg, "attribute_map", {}):
            setattr(cfg, k, v)
    if getattr(cfg, "layer_types", None):  # one entry per layer (Qwen3): keep the first layers' kinds
        cfg.layer_types = cfg.layer_types[: cfg.num_hidden_layers]
    cfg.vocab_size = vocab_size
    return cfg


def _not_cached(model_name: str, tiny: bool = False) -> WorkshopError:
    shipped = ", ".join(SHIPPED_CONFIGS)
    if tiny:
        return WorkshopError(
            f"--tiny builds a small model from {model_name!r}'s config, which is not in the Hugging Face cache, "
            "and the hub is not reachable (or HF_HUB_OFFLINE=1).",
            f"use a model whose config is shipped ({shipped}), or on a machine with internet run "
            f"`hf download {model_name} config.json` (same HF_HOME as here).",
        )
    return WorkshopError(
        f"Model {model_name!r} is not in the Hugging Face cache, and the hub is not reachable (or HF_HUB_OFFLINE=1).",
        f"on a machine with internet run `hf download {model_name}` (same HF_HOME as here), or pass "
        f"--random-weights to build the published architecture with random weights (shipped for {shipped}), "
        "or --tiny.",
    )


# safetensors only: a pickle (pytorch_model.bin) can name code that loading it runs (`check_model_source` refuses it)
WEIGHTS = ("*.safetensors", "*.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def is_local_path(model_name: str) -> bool:
    """True when `model_name` names a directory rather than a hub repository ("org/name")."""
    return Path(model_name).expanduser().exists() or model_name.startswith((".", "/", "~")) or model_name.count("/") > 1


def check_model_source(model_name: str, tiny: bool = False, random_weights: bool = False) -> None:
    """Check, without loading anything, that `model_name` can be built the way asked: a local directory has
    a config.json, weights (unless `random_weights` or `tiny`) and a tokenizer (unless one is made); a hub
    name is shipped or cached when the hub is unreachable; no model needs custom code.

    Raises:
        WorkshopError: each case its own message: a local path that does not exist or is no model directory,
            a directory without weights (or with empty or unreadable ones, or only a pickle: torch's weights_only
            loader is an allowlist of what a pickle may name, with a history of bypasses such as CVE-2025-32434, while a
            safetensors file holds tensors and nothing else), without a tokenizer, a model that needs
            `trust_remote_code` (the workshop never runs a model's own Python code), a hub model neither cached nor
            reachable. Each is a case whose transformers error is a traceback or misleading (tried with transformers
            5.24: a missing directory is "Repo id must use alphanumeric chars", a file "not a valid JSON file", no
            config.json a tokenizer ValueError, empty weights safetensors' "header too small", no tokenizer an
            empty one and a run of one-token examples). A random model's vocabulary below the local tokenizer's is
            `check_model_fits_data`'s."""
    builds = "--tiny builds a small model from its config.json" if tiny else ""
    if is_local_path(model_name):
        path = Path(model_name).expanduser()
        if not path.is_dir():
            raise WorkshopError(
                f"Model directory {model_name} does not exist{' (it is a file)' if path.exists() else ''}.",
                "give a directory written by save_pretrained (config.json, weights, tokenizer), "
                f"or a hub name such as {DEFAULT_MODEL}" + (f"; {builds}." if tiny else "."),
            )
        config = path / "config.json"
        if not config.is_file():
            raise WorkshopError(
                f"{model_name} has no config.json, so it is not a Hugging Face model directory.",
                "give the directory that model.save_pretrained(...) wrote.",
            )
        cfg = read_json_object(
            config,
            "is not a valid model config",
            "give the directory that model.save_pretrained(...) wrote, with its config.json "
            "whole (copy it again if it was cut short).",
        )
        check_no_custom_code(cfg, model_name)
        if tiny:
            return
        has_tokenizer = any((path / t).is_file() for t in TOKENIZER_FILES)
        weights = [f for w in WEIGHTS for f in path.glob(w)]
        bad = [f.name for f in weights if not os.access(f, os.R_OK) or f.stat().st_size == 0]
        if not (random_weights or weights) and (pickles := sorted(f.name for f in path.glob("pytorch_model*.bin"))):
            raise WorkshopError(
                f"{model_name} holds its weights only as a pickle ({', '.join(pickles)}), which can run code as it "
                "loads; the workshop loads weights from safetensors files only, and nothing was loaded.",
                f"download the model's safetensors (hf download <model> --include '*.safetensors' --local-dir "
                f'{model_name}), or, trusting its source, convert it once: python -c "from transformers import '
                f"AutoModelForCausalLM as M; M.from_pretrained('{model_name}').save_pretrained('{model_name}')\".",
            )
        if not random_weights and (bad or not weights):
            raise WorkshopError(
                f"{model_name} has a config.json but "
                + (
                    f"weights that are empty or cannot be read: {', '.join(bad)}."
                    if bad
                    else "no weights (*.safetensors)."
                ),
                "copy the weights there again (model."
                "save_pretrained writes them), or pass --random-weights to train its architecture from random weights.",
            )
        if not random_weights and not has_tokenizer:
            raise WorkshopError(
                f"{model_name} has weights but no tokenizer ({', '.join(TOKENIZER_FILES)}).",
                f"save the tokenizer there too: AutoTokenizer.from_pretrained(<source>)"
                f".save_pretrained('{model_name}').",
            )
        return
    if model_name in SHIPPED_CONFIGS and (tiny or random_weights):
        return
    if not hub_reachable():
        cached = try_to_load_from_cache(model_name, "config.json")
        if not isinstance(cached, str):
            raise _not_cached(model_name, tiny)
        check_no_custom_code(
            read_json_object(
                cached,
                "is not a valid model config",
                "delete that cached file and download the model again (`hf download`).",
            ),
            model_name,
        )


def check_no_custom_code(config: dict, model_name: str) -> None:
    """Refuse a model (or a checkpoint) whose config.json (`config`, as a dict) names an architecture transformers
    does not implement: loading it would need its own Python code (auto_map), which the workshop never runs.

    Raises:
        WorkshopError: naming `model_name`, the architecture and the fix."""
    if config.get("model_type") not in CONFIG_MAPPING_NAMES:
        raise WorkshopError(
            f"{model_name} is a {config.get('model_type')!r} model, which transformers does not implement"
            + (
                " (its config.json points to the model's own Python code, auto_map); the workshop never runs "
                "downloaded code (trust_remote_code stays off)."
                if "auto_map" in config
                else "."
            ),
            f"use a model whose architecture transformers supports natively, such as {DEFAULT_MODEL}.",
        )


def load_model_and_tokenizer(
    model_name: str = DEFAULT_MODEL,
    tiny: bool = False,
    random_weights: bool = False,
    attn_implementation: str | None = None,
):
    """Return (model, tokenizer, info) for fine-tuning, model in fp32 on the CPU (the Trainer moves it).

    fp32 whatever the checkpoint's dtype: mixed precision keeps fp32 master weights (AMP or DeepSpeed casts).

    Args:
        model_name: hub name or local path of a causal LM.
        tiny: build the same family at `TINY_DIMS` with a locally trained 4096-token tokenizer.
        random_weights: the full published architecture with random weights; the real tokenizer when it
            is cached, else a locally trained 32,000-token one (sequence lengths then differ a little).
        attn_implementation: "eager", "sdpa", "flash_attention_2", or None for the best the model
            supports (sdpa where available; BLOOM has eager only).

    `info` is a dict: {"num_params", "largest_layer_params", "num_layers", "hidden_size", "attention_width"
    (heads x head dim), "lm_head_params" (vocabulary x hidden size), "attn_implementation", "tokenizer"}.

    Raises:
        WorkshopError: the model or tokenizer is not available offline (`check_model_source` says why first)."""
    tok_source = "local BPE"
    if tiny:
        tokenizer = local_tokenizer(TINY_VOCAB)
        config = tiny_config(model_name, len(tokenizer))
    elif random_weights:
        config = architecture_config(model_name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                model_name, local_files_only=not hub_reachable(), trust_remote_code=False
            )
            tok_source = model_name
            # transformers 5 builds an empty tokenizer (1 token, every text encoded to []) from a directory
            # with a config.json and no tokenizer files, rather than raising: every example would be 1 token
            if not tokenizer("Question: Who?").input_ids:
                raise ValueError(f"{model_name} has no tokenizer")
        except (OSError, ValueError):
            tokenizer, tok_source = local_tokenizer(LOCAL_VOCAB), "local BPE"
    else:
        offline = not hub_reachable()  # fail at once from the cache instead of retrying the network
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_name, local_files_only=offline, trust_remote_code=False)
            model = AutoModelForCausalLM.from_pretrained(
                model_name,
                attn_implementation=attn_implementation,
                dtype=torch.float32,
                local_files_only=offline,
                trust_remote_code=False,
            )
            tok_source = model_name
        except OSError as e:
            raise _not_cached(model_name) from e
        config = None
    if tokenizer.pad_token is None:  # Qwen3 and BLOOM ship one; GPT-2-style tokenizers do not
        tokenizer.pad_token = tokenizer.eos_token
    if config is not None:
        # A random model learns whatever ids the tokenizer uses; say so in its config (and stop the
        # Trainer's warning that the two disagree).
        config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        config.bos_token_id = tokenizer.bos_token_id
        if attn_implementation:
            config._attn_implementation = attn_implementation
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    largest = max(p.numel() for p in model.parameters())  # the embedding matrix, for these models
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    info = {
        "num_params": sum(p.numel() for p in model.parameters()),
        "largest_layer_params": largest,
        "num_layers": c.num_hidden_layers,
        "hidden_size": c.hidden_size,
        "attention_width": c.num_attention_heads * head_dim,
        "lm_head_params": model.get_output_embeddings().weight.numel(),
        "attn_implementation": model.config._attn_implementation,
        "tokenizer": tok_source,
    }
    return model, tokenizer, info


def check_model_fits_data(net, tokenizer, max_length: int, model_name: str) -> None:
    """Refuse, before anything is written, a model that cannot take this run's sequences: `max_length` beyond
    its positions (config.max_position_embeddings; models without one, such as BLOOM's ALiBi, have no limit
    here), or a tokenizer with more ids than the embedding has rows (every id past them fails at step 0 with
    an index error), whatever the model's source.

    Raises:
        WorkshopError: the limit, the value asked for and the fix."""
    positions = getattr(net.config, "max_position_embeddings", None)
    if positions and max_length > positions:
        raise WorkshopError(
            f"--max-length {max_length} is longer than {model_name} has positions for: it has {positions} positions.",
            f"pass --max-length {positions} or less.",
        )
    rows = net.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise WorkshopError(
            f"{model_name}'s embedding has {rows:,} rows and its tokenizer {len(tokenizer):,} ids: "
            f"every id from {rows:,} on would fail at the first step.",
            "use the tokenizer saved with the model, or a model whose vocab_size covers the tokenizer.",
        )


def count_params(model_name: str = DEFAULT_MODEL, tiny: bool = False) -> dict:
    """Parameter counts of the full-size architecture (with `tiny`, of its tiny version, `tiny_config`), without
    allocating it (built on the meta device).

    Returns {"num_params", "largest_layer_params", "num_layers", "hidden_size", "vocab_size"}; a few
    seconds for a 0.6B model, no memory. Used in `00_setup` to estimate memory before any download."""
    cfg = tiny_config(model_name, len(local_tokenizer(TINY_VOCAB))) if tiny else architecture_config(model_name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return {
        "num_params": sum(p.numel() for p in model.parameters()),
        "largest_layer_params": max(p.numel() for p in model.parameters()),
        "num_layers": cfg.num_hidden_layers,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
    }


def compute_logits_where_labelled(model) -> None:
    """Make `model`'s loss compute vocabulary logits only at the positions that carry a label (in place).

    A causal LM's forward projects every position onto the vocabulary: [B, L, V] 16-bit logits and an fp32 copy for
    the loss (for a Qwen3-0.6B micro-batch of 16,384 tokens, 16,384 x 151,936 x 6 bytes = 14.9 GB), while with the
    loss on the answers few positions have a target. Here the hidden states are gathered at the labelled positions
    first, [K, H], and only those projected, [K, V]: the same loss exactly (as `ForCausalLMLoss`), without the full
    logits. transformers' own `logits_to_keep`, per token instead of per position.

    Only a forward with `labels` changes (then `logits` holds the [K, V] rows); without labels, as in
    `generate`, the model's own forward runs. The positions come with the batch (`data.make_collator`), else are found
    on the GPU, which stalls the CPU (lab/bench.py). Works for any `*ForCausalLM` whose `base_model` returns
    `last_hidden_state` and whose output embedding is the LM head (Qwen3, Llama, BLOOM, GPT-2)."""
    own_forward = model.forward

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        labels=None,
        num_items_in_batch=None,
        labelled_positions=None,
        **kwargs,
    ):
        if labels is None:
            return own_forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        kwargs.setdefault("use_cache", False)  # a loss needs no KV cache (and a cache recompiles compiled blocks)
        hidden = self.base_model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
        if labelled_positions is None:  # found here, which waits for the GPU; the collator's come for free
            labelled_positions = labelled_positions_of(labels)
        hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, labelled_positions)  # [K, H]
        targets = labels.reshape(-1).index_select(0, labelled_positions + 1)  # position t predicts token t + 1
        logits = self.get_output_embeddings()(hidden).float()
        if num_items_in_batch is None:
            loss = F.cross_entropy(logits, targets)
        else:
            loss = F.cross_entropy(logits, targets, reduction="sum") / num_items_in_batch
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    model.forward = types.MethodType(forward, model)


def compile_layers(model) -> int:
    """torch.compile each transformer block of `model` in place (regional compilation: one graph, reused
    by every block), so each block's many small element-wise kernels (norms, rotary embedding, SwiGLU) fuse.
    The blocks are the classes the model lists in `_no_split_modules`; their inputs' sequences and length are
    marked dynamic at once, so one graph serves every micro-batch shape (else a static graph for the first shape,
    then a second compile). Returns how many blocks were compiled. GPU only; the first step compiles."""

    @torch.compiler.disable  # runs before the compiled graph, not inside it
    def mark_dynamic(block, args, kwargs):
        for t in [*args, *kwargs.values(), *(kwargs.get("position_embeddings") or ())]:
            if isinstance(t, torch.Tensor) and t.dim() >= 2:
                for dim in (0, 1):  # sequences, length
                    torch._dynamo.maybe_mark_dynamic(t, dim)

    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    for block in blocks:
        block.register_forward_pre_hook(mark_dynamic, with_kwargs=True)
        block.compile()
    return len(blocks)
