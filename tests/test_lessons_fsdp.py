"""Notebook 03e's lesson (`workshop_lessons.fsdp`): which runs a machine makes, and the decision table where no run
and no reference is on file. Its figures from real runs are checked on the executed notebook's own runs
(tests/test_executed_notebooks.py)."""

from workshop_lessons import fsdp


def test_a_machine_makes_the_runs_it_can_measure():
    assert fsdp.runs_here(0) == ["stage3-2", "fsdp2-2"]  # a CPU: the two gloo ranks, nothing compiled
    assert fsdp.runs_here(1) == [n for n, (_, ranks, _) in fsdp.RUNS.items() if ranks == 1]
    assert fsdp.runs_here(2) == fsdp.runs_here(8) == list(fsdp.RUNS)
    assert {e for e, _, _ in fsdp.RUNS.values()} == {"stage3", "fsdp2"}


def test_without_runs_or_a_reference_every_question_is_not_measured(tmp_path):
    rows = fsdp.decision(tmp_path / "mine", ref=tmp_path / "no-reference")
    assert len(rows) == len(fsdp.QUESTIONS) + 1  # and the collectives' volume
    assert all(r.source == "not measured" and r.comparison is None and r.better == "not measured" for r in rows)
    t = fsdp.decision_table(rows)
    assert list(t["question"]) == [r.question for r in rows] and set(t["FSDP2 / ZeRO-3"]) == {"n/a"}
    assert fsdp.collective_table(tmp_path).empty
