"""Notebook 03e's lesson (`workshop_lessons.fsdp`): which runs a machine makes, the decision table where no run
and no reference is on file, and the reference it falls back on. Its figures from real runs are checked on the executed notebook's own runs
(tests/test_executed_notebooks.py)."""

import json

import workshop_lessons as lessons
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


def test_the_reference_answers_every_question_from_runs_made_as_the_notebook_makes_them(tmp_path):
    ref = fsdp.REFERENCE_RUNS
    for folder in ("runs", "repeat"):  # every run twice, fresh processes: the band is their spread
        for name, (experiment, ranks, _) in fsdp.RUNS.items():
            r = json.loads((ref / folder / name / "results.json").read_text())
            assert (r["experiment"], r["world_size"], r["max_steps"]) == (experiment, ranks, lessons.GPU_MAX_STEPS)
            assert "H200" in r["device"] and not r["tiny"] and r["steady_steps"] >= lessons.GPU_MAX_STEPS // 2
    rows = fsdp.decision(tmp_path / "no-runs-here")
    assert [r.source for r in rows] == ["the reference"] * len(rows) and all(r.comparison for r in rows)
    tps = "steady_train_tokens_per_second"
    for (_, metric, z3, f2, _), row in zip(fsdp.QUESTIONS, rows):  # the band: the wider of the two runs' spreads
        spreads, figures = [], []
        for name in (z3, f2):
            runs = [json.loads((ref / f / name / "results.json").read_text()) for f in ("runs", "repeat")]
            v = [r[metric] for r in runs]
            spreads.append((max(v) - min(v)) / ((max(v) + min(v)) / 2))
            figures.append(min(runs, key=lambda r: r[tps])[metric])  # the median run of two rounds: the slower
        assert row.comparison.band == max(spreads)
        assert (row.comparison.other, row.comparison.value) == tuple(figures)
    assert rows[-1].comparison.band is not None
