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
