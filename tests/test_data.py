import json
import os
import random

import pytest

from workshop_lib import data
from workshop_lib.data import TokenBudgetBatchSampler, encode_example, load_squad, read_squad_json, tokenize_squad
from workshop_lib.errors import WorkshopError
from workshop_lib.model import local_tokenizer


@pytest.fixture(scope="module")
def tok():
    return local_tokenizer()


def test_bundled_squad_is_the_official_prefix():
    train = load_squad("train", num_samples=500)
    assert len(train) == 500
    assert train[0]["id"] == "5733be284776f41900661182"  # first question of the official train-v1.1.json
    assert train[0]["answers"]["text"][0] == "Saint Bernadette Soubirous"
    dev = load_squad("validation", num_samples=50)
    assert dev[0]["id"] == "56be4db0acb8001400a502ec"  # first question of the official dev-v1.1.json


def test_answer_only_loss_labels_exactly_the_answer(tok):
    ex = load_squad("train", 1)[0]
    enc = encode_example(ex, tok, 512, "answer")
    graded = [t for t, lab in zip(enc["input_ids"], enc["labels"]) if lab != -100]
    assert tok.decode(graded) == " Saint Bernadette Soubirous<|endoftext|>"
    assert tok.decode(enc["input_ids"]).startswith("Question: To whom did the Virgin Mary")
    all_enc = encode_example(ex, tok, 512, "all")
    assert all_enc["labels"] == all_enc["input_ids"]


def test_long_context_is_shortened_around_the_answer_never_cutting_it(tok):
    ex = load_squad("train", 1)[0]
    enc = encode_example(ex, tok, 100, "answer")
    assert enc["shortened"] and len(enc["input_ids"]) <= 100
    graded = [t for t, lab in zip(enc["input_ids"], enc["labels"]) if lab != -100]
    assert tok.decode(graded) == " Saint Bernadette Soubirous<|endoftext|>"
    assert "Bernadette" in tok.decode(enc["input_ids"][: -len(graded)])  # the window keeps the answer span
    assert encode_example(ex, tok, 12, "answer") is None  # the question alone does not fit: dropped


def test_tokenize_reports_counts(tok):
    ds, stats = tokenize_squad(load_squad("train", 40), tok, max_length=128)
    assert stats.total == 40 and stats.used + stats.dropped == 40
    assert stats.context_shortened > 0 and stats.max_tokens <= 128
    assert len(ds) == stats.used and sum(map(len, ds["input_ids"])) == stats.tokens


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ('{"version": "1.1"}', "not in the SQuAD layout: data: Field required"),
        (
            '{"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [{"id": "q1", "question": "Why?", '
            '"answers": []}]}]}]}',
            r"data.0.paragraphs.0.qas.0.answers: List should have at least 1 item .*\nTo fix: .*unanswerable",
        ),
        (
            '{"data": [{"title": "t", "paragraphs": [{"qas": [{"id": "a", "question": "q?", "answers": '
            '[{"text": "x", "answer_start": 0}]}]}]}]}',
            "data.0.paragraphs.0.context: Field required",
        ),
        # every field of the wrong type is named by its place with what it should be (pydantic's validation of the
        # layout, `data._Squad`), not a traceback from deeper down
        ('{"data": 5}', r"data: Input should be a valid list \(got '5'\)"),
        ('{"data": [{"paragraphs": [{"context": null, "qas": []}]}]}', "context: Input should be a valid string"),
        (
            '{"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "a", "question": 7, "answers": '
            '[{"text": "x", "answer_start": 0}]}]}]}]}',
            r"qas.0.question: Input should be a valid string \(got '7'\)",
        ),
        (
            '{"data": [{"paragraphs": [{"context": "c x", "qas": [{"id": "a", "question": "q?", "answers": '
            '[{"text": "x", "answer_start": "abc"}]}]}]}]}',
            "answers.0.answer_start: Input should be a valid integer",
        ),
        (
            '{"data": [{"paragraphs": [{"context": "c x", "qas": [{"id": "a", "question": "q?", "answers": '
            '[{"text": "x", "answer_start": -3}]}]}]}]}',
            "answer_start: Input should be greater than or equal to 0",
        ),
        (
            '{"data": [{"paragraphs": [{"context": "c x", "qas": [{"id": "a", "question": "q?", "answers": '
            '[{"text": " ", "answer_start": 0}]}]}]}]}',
            "answers.0.text: String should match pattern",
        ),
        ('{"data": [{"paragraphs": "abc"}]}', "data.0.paragraphs: Input should be a valid list"),
        ('{"data": [{"paragraphs": [{"context": "c", "qas": [17]}]}]}', "qas.0: Input should be a valid dictionary"),
        ('{"data": []}', "holds no questions"),
    ],
)
def test_bad_data_files_say_how_to_fix(tmp_path, content, expected):
    path = tmp_path / "squad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(WorkshopError, match=expected) as err:
        read_squad_json(path)
    assert "To fix:" in str(err.value)


def test_any_squad_file_can_be_named(tmp_path):
    rows = {
        "data": [
            {
                "title": "T",
                "paragraphs": [
                    {
                        "context": "Paris is the capital of France.",
                        "qas": [
                            {
                                "id": "a",
                                "question": "What is the capital of France?",
                                "answers": [{"text": "Paris", "answer_start": 0}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    (tmp_path / "mine.json").write_text(json.dumps(rows))
    ds = load_squad("train", data_file=str(tmp_path / "mine.json"))
    assert ds[0]["answers"]["text"] == ["Paris"]


def test_a_wrong_answer_start_is_repaired_and_a_missing_answer_dropped(tmp_path, tok):
    context = "The cat sat. " * 60 + "Paris is the capital of France. " + "The dog ran. " * 60
    qas = [
        {
            "id": "moved",
            "question": "What is the capital of France?",
            "answers": [{"text": "Paris", "answer_start": 3}],
        },  # points at "cat", not at "Paris"
        {
            "id": "absent",
            "question": "What is the capital of Spain?",
            "answers": [{"text": "Madrid", "answer_start": 0}],
        },
    ]
    (tmp_path / "f.json").write_text(
        json.dumps({"data": [{"title": "T", "paragraphs": [{"context": context, "qas": qas}]}]})
    )
    ds, stats = tokenize_squad(load_squad("train", data_file=str(tmp_path / "f.json")), tok, max_length=64)
    assert (stats.total, stats.used, stats.answer_start_repaired, stats.answer_not_in_context) == (2, 1, 1, 0 + 1)
    assert stats.context_shortened == 1 and stats.source.startswith("file ")
    assert "Paris is the capital" in tok.decode(ds[0]["input_ids"])  # the window is around the real answer


def test_token_budget_batches_hold_every_sequence_once_within_the_budget():
    import random

    from workshop_lib.data import TokenBudgetBatchSampler

    rng = random.Random(0)
    lengths = [rng.randint(30, 600) for _ in range(3000)] + [5000]  # one longer than the budget: alone
    s = TokenBudgetBatchSampler(lengths, 4096, seed=1)
    first, second = list(s), list(s)
    assert sorted(i for b in first for i in b) == list(range(len(lengths)))
    assert len(first) == len(second) == len(s) and first != second  # same batches, a new order each epoch
    assert sorted(map(sorted, first)) == sorted(map(sorted, second))
    s.set_epoch(1)  # what a run resumed in its second epoch asks: the order an uninterrupted run saw
    assert list(s) == second
    for b in first:
        assert len(b) == 1 or len(b) * -(-max(lengths[i] for i in b) // 8) * 8 <= 4096
    real = sum(lengths[:-1]) / sum(len(b) * -(-max(lengths[i] for i in b) // 8) * 8 for b in first if len(b) > 1)
    assert real > 0.9  # similar lengths together: little padding


def test_token_budget_batches_come_in_the_same_order_with_data_loader_workers():
    """torch's DataLoader with workers calls iter() on its batch sampler twice and uses the second: the epoch's
    order must not depend on that (it did: `--dataloader-num-workers 2` trained on the next epoch's order)."""
    from torch.utils.data import DataLoader

    from workshop_lib.data import TokenBudgetBatchSampler

    lengths = [30 + (i * 37) % 500 for i in range(400)]
    orders = []
    for workers in (0, 2):
        s = TokenBudgetBatchSampler(lengths, 2048, seed=3)
        loader = DataLoader(range(len(lengths)), batch_sampler=s, num_workers=workers, collate_fn=list)
        orders.append([[list(b) for b in loader] for epoch in range(2) if s.set_epoch(epoch) is None])
    assert orders[0] == orders[1] and orders[0][0] != orders[0][1]
    assert orders[0][0] == list(TokenBudgetBatchSampler(lengths, 2048, seed=3))


def test_dropping_the_attention_mask_of_right_padded_batches_is_exact(tok):
    """Causal attention never looks at the pads after a sequence, and pads carry label -100: the loss is the
    same with and without the mask (what lets SDPA use its flash kernel on a GPU)."""
    import torch

    from workshop_lib.data import make_collator
    from workshop_lib.model import load_model_and_tokenizer

    net, tok, _ = load_model_and_tokenizer("Qwen/Qwen3-0.6B", tiny=True)
    ds, _ = tokenize_squad(load_squad("train", 6), tok, max_length=512)
    feats = [ds[i] for i in range(6)]
    with_mask, without = make_collator(tok)(feats), make_collator(tok, attention_mask=False)(feats)
    assert "attention_mask" not in without and (with_mask["attention_mask"] == 0).any()  # really padded
    with torch.no_grad():
        a, b = net(**with_mask).loss, net(**without).loss
    assert torch.allclose(a, b, atol=1e-5), (a, b)


def test_step_counts_come_from_the_sampler_that_trains():
    """results.json's steps_per_epoch and the Trainer's micro-batch count come from the sampler built with the run's
    seed: with more questions than one sort chunk (2,048), the seed changes how many micro-batches an epoch has."""
    import random

    from workshop_lib.config import RunConfig
    from workshop_lib.data import TokenBudgetBatchSampler
    from workshop_lib.train import token_budget_batches, trainer_micro_batch

    rng = random.Random(0)
    lengths = [rng.randint(60, 800) for _ in range(5000)]
    ds = {"input_ids": [[0] * n for n in lengths]}
    counts = {seed: len(TokenBudgetBatchSampler(lengths, 4096, seed)) for seed in range(6)}
    assert len(set(counts.values())) > 1, counts  # else this data could not show the bug
    for seed, n in counts.items():
        cfg = RunConfig(
            "stage2", batching="token_budget", max_tokens_per_micro_batch=4096, seed=seed, gradient_accumulation_steps=1
        )
        assert len(token_budget_batches(cfg, ds)) == n  # the sampler the run trains with and record counts
        assert trainer_micro_batch(cfg, token_budget_batches(cfg, ds)) == round(len(lengths) / n)


def test_reading_squad_json_peaks_below_the_parse_factor():
    """`data.PARSE_FACTOR`, the memory check of a data file, against the peak of `read_squad_json`'s parse (json.loads,
    then pydantic's validation of the layout) on the bundled train set."""
    import tracemalloc

    path = data.BUNDLED_FILES["train"]
    tracemalloc.start()
    try:
        data._Squad.model_validate(json.loads(path.read_text(encoding="utf-8")))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 4 < peak / path.stat().st_size < data.PARSE_FACTOR


def test_a_pipe_as_the_data_file_is_named_for_what_it_is(tmp_path):
    fifo = tmp_path / "squad.json"
    os.mkfifo(fifo)
    with pytest.raises(WorkshopError, match="is not a regular file .*\nTo fix: give the path of a SQuAD"):
        data.check_squad_path(fifo)


def test_a_data_file_too_large_for_the_memory_is_refused_before_it_is_read(tmp_path):
    """A file whose reading would take more memory than is available (a sparse file: its size, no bytes on disk)."""
    import psutil

    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.write(b"{")
        f.truncate(int(psutil.virtual_memory().available / data.PARSE_FACTOR) + 2**30)
    with pytest.raises(WorkshopError, match="reading it would take about .*\nTo fix: give --train-file a smaller"):
        data.check_squad_path(big)


@pytest.mark.parametrize(
    "head, size, expected",
    [
        (b'{"data": [', 2**30, r"holds 1,024 MiB: reading it .* minutes"),  # 1 GiB, whatever the memory available
        (b"id,question,context\n", 2**30, "is not a SQuAD JSON file: it begins with 'id,question"),
        (b"PK\x03\x04", 100, r"is not a SQuAD JSON file: it begins with 'PK\\x03"),  # a zip
        (b"", 0, "is not a SQuAD JSON file: it begins with ''"),
    ],
)
def test_a_data_file_too_large_or_not_json_is_refused_from_its_size_and_first_bytes(tmp_path, head, size, expected):
    """Checked before the file is read (`config.resolve` calls `check_squad_path`): its size against `MAX_DATA_MIB`
    and its first bytes against JSON's (a sparse file: its size, no bytes on disk)."""
    path = tmp_path / "squad.json"
    with path.open("wb") as f:
        f.write(head)
        f.truncate(max(size, len(head)))
    with pytest.raises(WorkshopError, match=expected) as err:
        data.check_squad_path(path)
    assert "To fix: give --train-file" in str(err.value)


def test_token_budget_batches_reach_the_ranks_of_one_step_in_groups_of_neighbours():
    """Under N ranks and accumulation A, batch i goes to rank i mod N, A per rank and step: each epoch's order
    moves groups of N x A batches that are neighbours in the length-sorted build order (one shape per step), a
    partial group last; with one micro-batch per step the order is the plain shuffle of the batches."""
    lengths = [random.Random(i).randint(20, 800) for i in range(3001)]  # 325 batches: a partial group
    one, two = (
        TokenBudgetBatchSampler(lengths, 4096, seed=5),
        TokenBudgetBatchSampler(lengths, 4096, seed=5, per_step=2),
    )
    assert one.batches == two.batches and len(one.batches) % 2 == 1
    order = list(two)
    assert sorted(map(tuple, order)) == sorted(map(tuple, two.batches))
    where = {tuple(b): i for i, b in enumerate(two.batches)}
    pairs = [(where[tuple(order[i])], where[tuple(order[i + 1])]) for i in range(0, len(order) - 1, 2)]
    assert all(b == a + 1 and a % 2 == 0 for a, b in pairs)  # each step's two batches: built side by side
    assert where[tuple(order[-1])] == len(order) - 1  # the partial group, last
    shuffled = list(one.batches)
    random.Random(5 + 1).shuffle(shuffled)
    assert list(one) == shuffled
