"""SQuAD as causal-LM prompts: loading, tokenising, loss masks (introduced in `01_baseline`).

Each question becomes one sequence::

    Question: {question} Context: {context} Answer: {answer}<eos>

`loss_on="answer"` (the default) puts labels on the answer and the end-of-sequence token only; the prompt tokens get
label -100, which the cross-entropy ignores, so the model is graded on answering and not on reproducing Wikipedia.
`loss_on="all"` (the original workshop's choice, recipe `classic`) puts labels on every non-padding token.

Long examples: an answer is never truncated away. A sequence beyond `max_length` has its context cut to a window
around the answer, or is dropped when even question and answer do not fit. A wrong `answer_start` is repaired to the
nearest occurrence; an answer not in the context is dropped. Every count is reported in `DataStats`."""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import datasets
import psutil
import pyarrow
import pydantic
from transformers import DataCollatorForSeq2Seq

from .errors import WorkshopError
from .hub import SQUAD, hub_reachable
from .units import MiB, ceil_div

BUNDLED_DIR = Path(__file__).parent / "squad"
BUNDLED_FILES = {"train": BUNDLED_DIR / "train-v1.1-subset.json", "validation": BUNDLED_DIR / "dev-v1.1-subset.json"}
# Memory to read a SQuAD JSON file, as a multiple of its size: json.loads and pydantic's validation of the layout
# peak at about 7x (tests/test_data.py measures it on the bundled train set), the rows then copied into a Dataset
PARSE_FACTOR = 8
# The largest data file read: about 4x SQuAD v1.1's train set (29 MiB; v2's: 40 MiB). Reading runs at a few MiB/s
# (json.loads, pydantic's validation, the Dataset: 1.2 s for the 4.4 MiB dev set on a 2-core machine), so a 1 GiB
# file would take minutes and ~8 GiB of memory before the first step
MAX_DATA_MIB = 128
PROMPT = "Question: {question} Context: {context} Answer: {answer}"
# Its pieces, tokenised one by one (training: `encode_example`; generation: `prompt_ids`).
PROMPT_HEAD, PROMPT_TAIL = "Question: {question} Context:", " Answer:"


@dataclass
class DataStats:
    """What tokenisation did to a split. Counts are examples (questions); tokens are non-padding tokens."""

    source: str = ""  # the file, the hub, or the bundled subset
    total: int = 0
    used: int = 0
    dropped: int = 0  # question + answer alone longer than max_length
    context_shortened: int = 0  # context cut to a window around the answer
    answer_start_repaired: int = 0  # answer_start moved to where the answer text is in the context
    answer_not_in_context: int = 0  # dropped: the answer text is nowhere in the context
    tokens: int = 0  # sum of sequence lengths of the used examples
    labelled_tokens: int = 0  # tokens that carry a label (the loss's targets): the answers, or all with loss_on all
    max_tokens: int = 0

    def as_dict(self) -> dict:
        return asdict(self) | {"mean_tokens": round(self.tokens / max(self.used, 1), 1)}


def check_squad_path(path: str | os.PathLike, option: str = "--train-file") -> Path:
    """`path` as a Path, when it names an existing file (read by `read_squad_json`; checked by
    `config.resolve` before anything is loaded).

    Raises:
        WorkshopError: the path does not exist, is a directory or no regular file (a pipe), does not begin as JSON
            does, or is larger than `MAX_DATA_MIB` or than this machine's available memory allows (`PARSE_FACTOR`);
            the fix names `option`. Reads the first 4 KiB only."""
    path = Path(path)
    if path.is_dir():
        raise WorkshopError(
            f"Data file {path} is a directory, not a SQuAD JSON file.",
            f"give the file itself, e.g. {option} {path / 'train-v1.1.json'}.",
        )
    if path.exists() and not path.is_file():
        raise WorkshopError(
            f"Data file {path} is not a regular file (a pipe, a socket or a device).",
            f"give the path of a SQuAD v1.1 JSON file saved on disk to {option}.",
        )
    if not path.is_file():
        raise WorkshopError(
            f"Data file {path} does not exist.",
            f"give the path of a SQuAD v1.1 JSON file, or leave {option} out to use SQuAD itself.",
        )
    with path.open("rb") as f:  # a SQuAD file is a JSON object: its first bytes tell, the rest is not read
        head = f.read(4096).lstrip()
    if not head.startswith((b"{", b"[")):
        raise WorkshopError(
            f"Data file {path} is not a SQuAD JSON file: it begins with {head[:24].decode(errors='replace')!r}.",
            f'give {option} a SQuAD v1.1 JSON file ({{"data": [...]}}), such as SQuAD\'s own train-v1.1.json.',
        )
    size, free = path.stat().st_size / MiB, psutil.virtual_memory().available / MiB
    if size > min(MAX_DATA_MIB, free / PARSE_FACTOR):
        raise WorkshopError(
            f"Data file {path} holds {size:,.0f} MiB: reading it would take about {PARSE_FACTOR * size:,.0f} MiB "
            f"of memory ({free:,.0f} MiB available here) and minutes; the workshop reads files of up to "
            f"{MAX_DATA_MIB} MiB.",
            f"give {option} a smaller file (SQuAD v1.1's train set is 29 MiB), or split this one.",
        )
    return path


# The SQuAD v1.1 layout, as pydantic validates it (`read_squad_json`): other fields (version, is_impossible) are ignored
class _Answer(pydantic.BaseModel):
    text: str = pydantic.Field(pattern=r"\S")  # not empty, not blank
    answer_start: int = pydantic.Field(ge=0, strict=True)  # a character offset into the context


class _Question(pydantic.BaseModel):
    id: str | int
    question: str
    answers: list[_Answer] = pydantic.Field(min_length=1)  # SQuAD v2's unanswerable questions cannot be trained on


class _Paragraph(pydantic.BaseModel):
    context: str
    qas: list[_Question]


class _Article(pydantic.BaseModel):
    title: object = ""
    paragraphs: list[_Paragraph]


class _Squad(pydantic.BaseModel):
    data: list[_Article]


def read_squad_json(path: str | os.PathLike, option: str = "--train-file") -> datasets.Dataset:
    """Read a file in the SQuAD v1.1 JSON layout into rows like Hugging Face's `squad` dataset. `option`: the
    command's option that named the file, for the fix of a missing one.

    Returns a Dataset with columns id, title, context, question, answers ({"text": [...],
    "answer_start": [...]}), in file order.

    Raises:
        WorkshopError: the file is missing or a directory, is not JSON, or is not in the SQuAD layout as pydantic
            validates it (`_Squad`; the first field missing or of another type named by its place, e.g.
            data.0.paragraphs.2.qas.5.answers: strings for context, question and text, a whole number >= 0 for
            answer_start, lists for data, paragraphs, qas and answers), a question without an answer (SQuAD v2
            "impossible" questions cannot be trained on here) or with a blank answer text; it holds no question."""
    path = check_squad_path(path, option)
    layout = (
        'the layout {"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", '
        '"answers": [{"text", "answer_start"}]}]}]}]}'
    )
    try:
        squad = _Squad.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:  # nested past Python's limit
        raise WorkshopError(
            f"{path} is not valid JSON ({e}).",
            "check the file is a complete SQuAD JSON file (re-download or re-export it).",
        ) from e
    except pydantic.ValidationError as e:
        err = e.errors()[0]
        got = "" if err["type"] == "missing" else f" (got {str(err['input'])[:40]!r})"
        raise WorkshopError(
            f"{path} is not in the SQuAD layout: {'.'.join(map(str, err['loc']))}: {err['msg']}{got}.",
            f"use {layout}, every question with at least one answer (remove SQuAD v2's unanswerable ones).",
        ) from None
    rows = [
        {
            "id": str(qa.id),
            "title": str(article.title),
            "context": para.context,
            "question": qa.question,
            "answers": {"text": [a.text for a in qa.answers], "answer_start": [a.answer_start for a in qa.answers]},
        }
        for article in squad.data
        for para in article.paragraphs
        for qa in para.qas
    ]
    if not rows:
        raise WorkshopError(f"{path} holds no questions.", "give a SQuAD file with at least one question.")
    return in_memory_dataset({key: [row[key] for row in rows] for key in rows[0]})


def load_squad(
    split: str = "train",
    num_samples: int | None = None,
    data_file: str | None = None,
    verbose: bool = True,
    count_option: str | None = None,
) -> datasets.Dataset:
    """The first `num_samples` SQuAD questions of `split` ("train" or "validation"). `count_option` is the
    calling command's option that sets `num_samples`, which the fix of a bad count names (default
    `workshop run`'s: --num-train-samples or --num-eval-samples).

    Source, in order: `data_file` when given; else `load_dataset(hub.SQUAD)`: from the Hugging Face hub, or with
    HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set from the datasets cache alone (`workshop download` fills it); else
    the real SQuAD subset bundled with this package (the same rows, in the same order). Prints one line saying which.

    Raises:
        WorkshopError: see `read_squad_json`; `split` is unknown; `num_samples` is below 1 or more than the
            source holds (say so rather than train on fewer than results.json would claim)."""
    if split not in BUNDLED_FILES:
        raise WorkshopError(f"Unknown split {split!r}.", "use 'train' or 'validation'.")
    if data_file:
        option = "--train-file" if split == "train" else "--eval-file"  # `workshop run` and `workshop eval`
        ds, source = read_squad_json(data_file, option), f"file {Path(data_file).resolve()}"
    else:
        ds = None
        online = hub_reachable()
        if online or datasets.config.HF_HUB_OFFLINE:  # offline, `load_dataset` reads its cache and nothing else
            try:
                ds = datasets.load_dataset(SQUAD, split=split)
                source = f"Hugging Face {'hub' if online else 'datasets cache'} ({SQUAD})"
            except Exception:  # no network, hub down, or not cached: the bundled copy is the same data
                ds = None
        if ds is None:
            ds = read_squad_json(BUNDLED_FILES[split])
            source = f"bundled SQuAD v1.1 subset ({BUNDLED_FILES[split]}; hub not used)"
    if num_samples is not None:
        option = count_option or ("--num-train-samples" if split == "train" else "--num-eval-samples")
        if num_samples < 1:
            raise WorkshopError(f"num_samples must be at least 1, got {num_samples}.", f"pass {option} N with N >= 1.")
        if num_samples > len(ds):
            raise WorkshopError(
                f"{num_samples:,} {split} questions asked for; the {source} holds {len(ds):,}.",
                f"pass {option} {len(ds)} or fewer, or a larger file.",
            )
        ds = ds.select(range(num_samples))
    ds.info.description = source  # where the rows came from; results.json's data_stats record it
    if verbose:
        print(f"SQuAD {split}: {len(ds)} questions from {source}")
    return ds


def locate_answer(context: str, answer: str, start: int) -> int | None:
    """Character offset of `answer` in `context`: `start` when it points there, else the occurrence nearest
    to `start`, else None (the context does not contain the answer)."""
    if context[start : start + len(answer)] == answer:
        return start
    found, i = [], context.find(answer)
    while i >= 0:
        found.append(i)
        i = context.find(answer, i + 1)
    return min(found, key=lambda j: abs(j - start)) if found else None


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def prompt_ids(question: str, context: str, tokenizer, max_length: int = 512) -> list[int]:
    """Token ids of a question's prompt without its answer, pieced together as `encode_example` does, for
    generating the answer: at most `max_length` tokens, the context cut at its end where longer (the answer's
    position is unknown at generation time)."""
    head, tail = _ids(tokenizer, PROMPT_HEAD.format(question=question)), _ids(tokenizer, PROMPT_TAIL)
    return head + _ids(tokenizer, f" {context}")[: max(0, max_length - len(head) - len(tail))] + tail


def encode_example(example: dict, tokenizer, max_length: int = 512, loss_on: str = "answer") -> dict | None:
    """Token ids and labels of one SQuAD row; None when the question and answer alone exceed max_length.

    Returns {"input_ids": list[int], "labels": list[int], "shortened": bool}, both lists of the same length
    L <= max_length; labels are -100 where no loss is taken."""
    if loss_on not in ("answer", "all"):
        raise WorkshopError(
            f"loss_on must be 'answer' or 'all', got {loss_on!r}.",
            "use 'answer' (loss on the answer tokens) or 'all' (every token).",
        )
    answer, start = example["answers"]["text"][0], example["answers"]["answer_start"][0]
    head = _ids(tokenizer, PROMPT_HEAD.format(question=example["question"]))
    tail = _ids(tokenizer, PROMPT_TAIL)
    answer_ids = _ids(tokenizer, f" {answer}") + [tokenizer.eos_token_id]
    enc = tokenizer(f" {example['context']}", add_special_tokens=False, return_offsets_mapping=True)
    ctx_ids, offsets = enc["input_ids"], enc["offset_mapping"]
    budget = max_length - len(head) - len(tail) - len(answer_ids)
    shortened = False
    if len(ctx_ids) > budget:
        if budget < 1:
            return None
        # Keep a window of `budget` context tokens centred on the answer span (char offsets are shifted by
        # the leading space). The answer is also given after "Answer:", so the window is a courtesy to the
        # model: the label tokens themselves are never cut.
        a0, a1 = start + 1, start + 1 + len(answer)
        inside = [i for i, (s, e) in enumerate(offsets) if e > a0 and s < a1] or [0]
        centre = (inside[0] + inside[-1]) // 2
        lo = max(0, min(centre - budget // 2, len(ctx_ids) - budget))
        ctx_ids, shortened = ctx_ids[lo : lo + budget], True
    prompt = head + ctx_ids + tail
    input_ids = prompt + answer_ids
    labels = ([-100] * len(prompt) + answer_ids) if loss_on == "answer" else list(input_ids)
    return {"input_ids": input_ids, "labels": labels, "shortened": shortened}


def tokenize_squad(
    ds: datasets.Dataset, tokenizer, max_length: int = 512, loss_on: str = "answer"
) -> tuple[datasets.Dataset, DataStats]:
    """Tokenise SQuAD rows into {"input_ids", "attention_mask", "labels"} (unpadded, each of length L_i).

    Returns the tokenised dataset and its `DataStats` (total, used, dropped, context_shortened,
    answer_start_repaired, answer_not_in_context, tokens, labelled_tokens). Padding is left to the collator
    (`make_collator`). The result is kept for the process (keyed by the questions' ids, the tokenizer's
    vocabulary and the settings), so the experiments of one notebook or benchmark tokenise once."""
    vocab = tokenizer.backend_tokenizer.to_str() if getattr(tokenizer, "is_fast", False) else str(tokenizer.get_vocab())
    key = hashlib.sha256(
        "\n".join([ds.info.description or "", vocab, str(max_length), loss_on, *ds["id"]]).encode()
    ).hexdigest()
    if key not in _TOKENIZED:
        if len(_TOKENIZED) >= 4:  # a train and an eval split of two settings at most
            _TOKENIZED.pop(next(iter(_TOKENIZED)))
        _TOKENIZED[key] = _tokenize_squad(ds, tokenizer, max_length, loss_on)
    out, stats = _TOKENIZED[key]
    return out, replace(stats)


_TOKENIZED: dict = {}


def _tokenize_squad(
    ds: datasets.Dataset, tokenizer, max_length: int, loss_on: str
) -> tuple[datasets.Dataset, DataStats]:
    stats = DataStats(source=ds.info.description or "", total=len(ds))
    out = {"input_ids": [], "attention_mask": [], "labels": []}
    for ex in ds:
        text, start = ex["answers"]["text"][0], ex["answers"]["answer_start"][0]
        found = locate_answer(ex["context"], text, start)
        if found is None:
            stats.answer_not_in_context += 1
            continue
        if found != start:
            stats.answer_start_repaired += 1
            ex = ex | {"answers": {"text": [text], "answer_start": [found]}}
        enc = encode_example(ex, tokenizer, max_length, loss_on)
        if enc is None:
            stats.dropped += 1
            continue
        stats.used += 1
        stats.context_shortened += enc["shortened"]
        stats.tokens += len(enc["input_ids"])
        stats.labelled_tokens += sum(y != -100 for y in enc["labels"])
        stats.max_tokens = max(stats.max_tokens, len(enc["input_ids"]))
        out["input_ids"].append(enc["input_ids"])
        out["attention_mask"].append([1] * len(enc["input_ids"]))
        out["labels"].append(enc["labels"])
    if not stats.used:
        raise WorkshopError(
            f"No example fits in max_length={max_length} tokens, or none has its answer in its context.",
            "raise --max-length, or check the file's answers.",
        )
    return in_memory_dataset(out), stats


def in_memory_dataset(columns: dict[str, list]) -> datasets.Dataset:
    """`datasets.Dataset.from_dict(columns)` with its fingerprint given: the SHA-256 of the columns as JSON.
    from_dict computes one by pickling the Arrow table with dill, which pickles pyarrow by value when it is
    installed outside a folder named site-packages (`pip install --target`, a cluster's module tree) and then fails
    on pyarrow's MonthDayNano (datasets >= 5.0.1, any pyarrow)."""
    digest = hashlib.sha256(json.dumps(columns, sort_keys=True).encode()).hexdigest()[:16]
    return datasets.Dataset(pyarrow.Table.from_pydict(columns), fingerprint=digest)


def make_collator(
    tokenizer,
    padding: str = "longest",
    max_length: int = 512,
    attention_mask: bool = True,
    labelled_positions: bool = False,
):
    """Pads input_ids (pad token), attention_mask (0) and labels (-100, ignored by the loss) on the right, per batch to
    a multiple of 8 (tensor-core friendly) for padding "longest", or every sequence to `max_length` tokens for
    "max_length" (the classic recipe). Batches are {"input_ids", "attention_mask", "labels"}: [B, L] int64; without
    "attention_mask" when `attention_mask` is False, which is exact for a causal model: every pad comes after its
    sequence's real tokens, which never attend forward, and pads carry no label. With `labelled_positions`, also
    "labelled_positions": [K] int64, the flat positions whose next token has a label (`labelled_positions_of`), found
    here on the CPU so the GPU need not be waited for."""
    tokenizer.padding_side = "right"
    if padding == "max_length":
        pad = DataCollatorForSeq2Seq(tokenizer, padding="max_length", max_length=max_length, label_pad_token_id=-100)
    else:
        pad = DataCollatorForSeq2Seq(tokenizer, padding="longest", pad_to_multiple_of=8, label_pad_token_id=-100)
    if attention_mask and not labelled_positions:
        return pad

    def collate(features):
        batch = pad(features)
        if not attention_mask:
            del batch["attention_mask"]
        if labelled_positions:
            batch["labelled_positions"] = labelled_positions_of(batch["labels"])
        return batch

    return collate


class TokenBudgetBatchSampler:
    """Micro-batches sized in tokens, not questions: sequences of similar length together, as many as fit
    `max_tokens` once padded (batch size x its longest sequence, rounded up to a multiple of 8 as the
    collator pads), so a micro-batch of short questions holds many and one of long questions few.

    The indices are shuffled with `seed`, sorted by length inside chunks of `chunk` sequences (as transformers'
    LengthGroupedSampler does) and cut into batches; each epoch yields the same batches in an order that depends on
    `seed` and the epoch alone (`set_epoch`), so a run resumed mid-epoch sees the batches an uninterrupted run would.
    The order moves groups of `per_step` (ranks x accumulation: the Trainer deals batches out round-robin) neighbours
    in length, so the micro-batches of one optimizer step have one shape and no rank waits long for another.

    Args:
        lengths: tokens of each sequence (L_i); max_tokens: padded tokens per micro-batch at most (a
            sequence longer than that is a batch of its own); seed: as TrainingArguments.seed; per_step:
            micro-batches per optimizer step, all ranks."""

    def __init__(self, lengths: list[int], max_tokens: int, seed: int = 42, chunk: int = 2048, per_step: int = 1):
        self.seed, self.epoch, self.per_step = seed, 0, per_step
        order = list(range(len(lengths)))
        random.Random(seed).shuffle(order)
        self.batches: list[list[int]] = []
        for i in range(0, len(order), chunk):
            batch, longest = [], 0
            for j in sorted(order[i : i + chunk], key=lambda k: lengths[k], reverse=True):
                if batch and ceil_div(max(longest, lengths[j]), 8) * 8 * (len(batch) + 1) > max_tokens:
                    self.batches.append(batch)
                    batch, longest = [], 0
                batch.append(j)
                longest = max(longest, lengths[j])
            self.batches.append(batch)

    @classmethod
    def for_dataset(cls, ds, max_tokens: int, seed: int, per_step: int = 1) -> TokenBudgetBatchSampler:
        """The sampler of a tokenised dataset (`tokenize_squad`'s): the one place that reads its lengths, so the
        training loop, the step counts in results.json and the lab's benchmark (lab/bench.py) see the same batches."""
        return cls([len(x) for x in ds["input_ids"]], max_tokens, seed, per_step=per_step)

    @property
    def mean_batch_size(self) -> float:
        """Sequences per micro-batch, on average over one pass."""
        return sum(map(len, self.batches)) / len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        # A generator: the epoch is read, and advanced, when the pass starts, not when the iterator is made.
        # torch's DataLoader with workers makes two and discards the first (`_MultiProcessingDataLoaderIter`):
        # advanced at once, the pass used would be the next epoch's (workers changed the batch order).
        n = self.per_step
        groups = [self.batches[i : i + n] for i in range(0, len(self.batches), n)]
        partial = groups.pop() if groups and len(groups[-1]) < n else []
        random.Random(self.seed + 1 + self.epoch).shuffle(groups)  # seed itself made the batches
        self.epoch += 1  # the next pass, where nothing calls set_epoch
        yield from (b for g in groups + [partial] for b in g)

    def __len__(self) -> int:
        return len(self.batches)


def labelled_positions_of(labels):
    """Flat indices into [B, L] (row-major, b x L + t) of the positions t whose next token has a label:
    [K] int64, for `model.compute_logits_where_labelled`. labels: [B, L], -100 where there is no target."""
    b, t = (labels[:, 1:] != -100).nonzero(as_tuple=True)
    return b * labels.shape[1] + t
