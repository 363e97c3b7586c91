"""The fine-tuned model, judged: its eval loss once reloaded from disk, its answers generated for SQuAD
questions, and their exact match and F1 (introduced in `03b_the_fine_tuned_model`; `workshop eval` and
`run_experiment --score-questions` call it).

EM and F1 are SQuAD v1.1's official definitions (Rajpurkar et al. 2016, evaluate-v1.1.py: normalised answers; EM 1 when
equal, F1 over shared tokens; the max over gold answers, averaged over questions, in percent), as torchmetrics' `SQuAD`
metric computes them offline (`evaluate.load("squad")` fetches its script from the hub)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
from torchmetrics.text import SQuAD
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

from . import env
from .data import load_squad, make_collator, prompt_ids, tokenize_squad
from .errors import WorkshopError
from .model import check_model_source
from .rundir import atomic_path, check_writable, write_json_atomic

PREDICTIONS, SCORES = "predictions.jsonl", "squad_scores.json"
# The Trainer's eval loss is a mean of per-batch means, so it depends on how the eval set is batched: one
# fixed eval batch keeps eval losses comparable when the training micro-batch changes (training's eval loss
# and `eval_loss` here both use it).
EVAL_BATCH_SIZE = 4


def model_dir(path: str | os.PathLike) -> Path:
    """The model directory of `path`: path/model for a run directory, else `path` itself (or a hub name).

    Raises:
        WorkshopError: `path` is neither a model directory nor a run holding one (`model.check_model_source`).
    """
    path = Path(path) / "model" if (Path(path) / "model" / "config.json").is_file() else Path(path)
    check_model_source(str(path))
    return path


def load_model(path: str | os.PathLike):
    """(model, tokenizer) from a run directory, a model directory or a hub name: fp32, in eval mode, on the
    GPU where there is one.

    Raises:
        WorkshopError: see `model_dir`.
    """
    path = model_dir(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return net.to("cuda" if torch.cuda.is_available() else "cpu").eval(), tokenizer


def eval_loss(net, tokenizer, config: dict) -> float:
    """The eval loss of `net` (nats per label token) on the eval questions of the run whose resolved settings `config`
    are given (results.json's "config"): the same questions, tokenisation, collator and eval batch size as the run's own
    per-epoch evaluation, through the HF Trainer's `evaluate`, without DeepSpeed."""
    rows = load_squad("validation", config["num_eval_samples"], config["eval_file"], verbose=False)
    ds, _ = tokenize_squad(rows, tokenizer, config["max_length"], config["loss_on"])
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_eval_batch_size=EVAL_BATCH_SIZE,
            report_to="none",
            use_cpu=not torch.cuda.is_available(),
            prediction_loss_only=True,
        )
        env.one_gpu_per_process(args)
        trainer = Trainer(
            model=net,
            args=args,
            eval_dataset=ds,
            data_collator=make_collator(tokenizer, config["padding"], config["max_length"]),
        )
        return trainer.evaluate()["eval_loss"]


@torch.no_grad()
def generate_answers(
    net,
    tokenizer,
    questions: list[str],
    contexts: list[str],
    batch_size: int = 16,
    max_new_tokens: int = 32,
    max_length: int = 512,
    progress: bool = True,
) -> list[str]:
    """Answer each question from its context by greedy generation after its training prompt without the
    answer ("Question: q Context: c Answer:", `data.prompt_ids`): batches of `batch_size` prompts padded on
    the left, at most `max_new_tokens` new tokens, stopped at EOS; the answer is the first line of the new
    text, stripped. Returns one string per question."""
    side, tokenizer.padding_side = tokenizer.padding_side, "left"  # new tokens follow every prompt directly
    answers = []
    try:
        # a bar for work of several batches only: one batch's would stay at 0% in a notebook's saved output
        batches = range(0, len(questions), batch_size)
        for i in tqdm(batches, desc="generating answers", disable=not progress or len(batches) < 2):
            ids = [
                prompt_ids(q, c, tokenizer, max_length - max_new_tokens)
                for q, c in zip(questions[i : i + batch_size], contexts[i : i + batch_size])
            ]
            batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt").to(net.device)
            out = net.generate(
                **batch,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
            texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            answers += [t.strip().split("\n")[0].strip() for t in texts]
    finally:
        tokenizer.padding_side = side
    return answers


def squad_scores(predictions: list[str], answers: list[list[str]]) -> dict:
    """SQuAD v1.1 exact match and F1 of `predictions` against each question's gold `answers` (torchmetrics' `SQuAD`, the
    official definition: see the module's docstring). Returns {"em", "f1" (percent, 0-100), "num_questions"}."""
    scores = SQuAD()(
        [{"prediction_text": p, "id": str(i)} for i, p in enumerate(predictions)],
        [{"answers": {"answer_start": [0] * len(a), "text": a}, "id": str(i)} for i, a in enumerate(answers)],
    )
    return {
        "em": round(scores["exact_match"].item(), 2),
        "f1": round(scores["f1"].item(), 2),
        "num_questions": len(predictions),
    }


def score_model(
    net, tokenizer, rows, batch_size: int = 16, max_new_tokens: int = 32, max_length: int = 512
) -> tuple[dict, list[dict]]:
    """Generate answers for SQuAD questions `rows` (`data.load_squad`'s dataset: id, question, context, answers) and
    score them. Returns (scores as `squad_scores`, one record per question: id, question, prediction, answers)."""
    predictions = generate_answers(
        net, tokenizer, rows["question"], rows["context"], batch_size, max_new_tokens, max_length
    )
    golds = [a["text"] for a in rows["answers"]]
    records = [
        {"id": i, "question": q, "prediction": p, "answers": a}
        for i, q, p, a in zip(rows["id"], rows["question"], predictions, golds)
    ]
    return squad_scores(predictions, golds), records


def evaluate_squad(
    path: str | os.PathLike, output_dir: str | os.PathLike | None = None, num_questions: int = 500, **options
) -> dict:
    """`workshop eval`: score the model of a run directory (its model/), a model directory or a hub name on
    the first `num_questions` SQuAD dev questions (`options`: eval_file, another SQuAD v1.1 JSON; the rest
    passed on to `score_model`), and write into `output_dir` (default: `path`)
    predictions.jsonl (one JSON line per question: id, question, prediction, answers) and squad_scores.json
    (em, f1, num_questions, model), each atomically. Returns the scores.

    Raises:
        WorkshopError: no model at `path`; `num_questions` below 1 or more than the dev file holds; an output
            directory where nothing can be written (`rundir.check_writable`).
    """
    source = model_dir(path)  # a missing local path is named as such, before the question of where to write
    if output_dir is None and not Path(path).is_dir():
        raise WorkshopError(
            f"{path} is a hub model: there is no directory of its own to write the scores into.",
            "pass --output-dir DIR.",
        )
    check_writable(output_dir or path, "--output-dir")
    rows = load_squad("validation", num_questions, options.pop("eval_file", None), count_option="--num-questions")
    net, tokenizer = load_model(source)
    scores, records = score_model(net, tokenizer, rows, **options)
    out = Path(output_dir or path)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / PREDICTIONS) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    scores["model"] = str(source)
    write_json_atomic(out / SCORES, scores)
    return scores
