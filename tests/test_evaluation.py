"""SQuAD exact match and F1 (`evaluation.squad_scores`, torchmetrics' implementation of the official v1.1
script) on hand-made predictions, each value worked out by hand from the definition."""

from workshop_lib.evaluation import squad_scores


def test_exact_match_and_f1_follow_the_official_v1_1_definition():
    predictions = ["the Eiffel Tower", "Paris, France", "1889", "London", "Denver Broncos!"]
    answers = [["Eiffel Tower"], ["Paris"], ["in 1889", "1889"], ["Paris"], ["The Denver Broncos", "Broncos"]]
    # 1. articles and case removed: "eiffel tower" = "eiffel tower": EM 1, F1 1
    # 2. "paris france" vs "paris": EM 0; precision 1/2, recall 1/1, F1 2 * 1/2 * 1 / (1/2 + 1) = 2/3
    # 3. the max over the gold answers: "1889" = "1889": EM 1, F1 1
    # 4. no shared token: EM 0, F1 0
    # 5. punctuation and "the" removed: "denver broncos" = "denver broncos": EM 1, F1 1
    scores = squad_scores(predictions, answers)
    assert scores == {
        "em": round(100 * 3 / 5, 2),
        "f1": round(100 * (1 + 2 / 3 + 1 + 0 + 1) / 5, 2),
        "num_questions": 5,
    }
    assert squad_scores(["Paris"], [["paris."]]) == {"em": 100.0, "f1": 100.0, "num_questions": 1}


def test_a_tiny_or_random_weight_model_is_named_as_such(tmp_path):
    """`workshop eval` and `ask` add a caveat for the models a run recorded as tiny or random-weight (run_config.json
    or results.json, the run directory or its model/), and none for any other model."""
    import json

    from workshop_lib.evaluation import model_caveat

    tiny, rand, real = (tmp_path / n for n in ("tiny", "rand", "real"))
    for d, cfg in (
        (tiny, {"tiny": True, "random_weights": False}),
        (rand, {"tiny": False, "random_weights": True}),
        (real, {"tiny": False, "random_weights": False}),
    ):
        (d / "model").mkdir(parents=True)
        (d / "run_config.json").write_text(json.dumps(cfg))
    assert "the tiny model" in model_caveat(tiny) and "not meant to be right" in model_caveat(tiny / "model")
    assert "random weights" in model_caveat(rand)
    (rand / "run_config.json").unlink()
    (rand / "results.json").write_text(json.dumps({"config": {"random_weights": True}}))
    assert "random weights" in model_caveat(rand / "model")
    assert (
        model_caveat(real) is None and model_caveat(real / "model") is None and model_caveat("Qwen/Qwen3-0.6B") is None
    )
    for damaged in ("[1, 2]", '{"config": 5}', '{"tiny": tr'):  # not an object, a config of another type, cut short
        (real / "run_config.json").write_text(damaged)
        assert model_caveat(real) is None
