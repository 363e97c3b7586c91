"""The core track's learner notebooks (course/00-04) read in a day: at most `MAX_WORDS` words of markdown in all,
no paragraph over `MAX_PARAGRAPH` words; the measurement mechanics are explained once, in 00_setup; and the
README's timetable (scripts/make_timetable.py) is current and fits the day."""

import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = sorted((ROOT / "course").glob("0[0-4]_*.py"))
MAX_WORDS, MAX_PARAGRAPH = 4000, 120


def make_timetable():
    spec = importlib.util.spec_from_file_location("make_timetable", ROOT / "scripts" / "make_timetable.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def markdown_paragraphs(path: Path) -> list[list[str]]:
    """Every `# %% [markdown]` cell's lines without their leading '# ', split into paragraphs at blank lines, each
    paragraph split on whitespace: the count the issue states, written here apart from make_timetable's."""
    paras, words, in_markdown = [], [], False
    for line in [*path.read_text().splitlines(), "# %%"]:
        if line.startswith("# %%") or not line.strip("#").strip():
            if words:
                paras.append(words)
            words = []
            if line.startswith("# %%"):
                in_markdown = "[markdown]" in line
        elif in_markdown:
            words += (line[2:] if line.startswith("# ") else line.lstrip("#")).split()
    return paras


def test_the_core_track_reads_in_at_most_4000_words_without_a_paragraph_over_120():
    assert [p.stem for p in CORE] == make_timetable().CORE
    counts = {p.name: sum(map(len, markdown_paragraphs(p))) for p in CORE}
    assert sum(counts.values()) <= MAX_WORDS, counts
    long = {p.name: [" ".join(w[:8]) for w in markdown_paragraphs(p) if len(w) > MAX_PARAGRAPH] for p in CORE}
    assert not any(long.values()), long


def test_the_timetable_counts_words_as_the_length_test_does():
    import workshop_lessons  # the one count, of the timetable and the notebooks' headers

    for p in CORE:
        assert workshop_lessons.prose_paragraphs(p) == markdown_paragraphs(p), p.name


def test_the_reading_speed_is_the_notebook_headers():
    import workshop_lessons

    assert make_timetable().WORDS_PER_MINUTE == workshop_lessons.WORDS_PER_MINUTE


def test_the_measurement_mechanics_are_explained_once_in_00_setup():
    """00_setup's section holds the warm-up, run order, steady state, bands and CPU memory; 01-04 point to it."""
    assert "## How the numbers are measured" in (ROOT / "course" / "00_setup.py").read_text()
    for p in CORE[1:]:
        prose = " ".join(" ".join(w) for w in markdown_paragraphs(p))
        assert "## How the numbers are measured" not in prose, p.name
        assert not [s for s in ("run_order", "first-run", "half as fast") if s in prose], p.name


def test_the_readme_timetable_is_current_and_the_core_track_fits_the_day():
    p = subprocess.run(
        [sys.executable, "scripts/make_timetable.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
    m = make_timetable()
    core = [r for r in m.rows() if r["core"]]
    assert sum(r["total"] for r in core) <= m.CORE_BUDGET_MIN
    assert all(r["gpu"] is not None and r["cpu"] is not None for r in core)  # every core notebook timed on both
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_check_names_a_stale_timetable_and_the_fix(tmp_path, monkeypatch, capsys):
    m = make_timetable()
    for d in ("course", "workshop_lessons/reference"):
        (tmp_path / d).mkdir(parents=True)
    for nb in m.CORE + m.OPTIONAL:
        (tmp_path / "course" / f"{nb}.py").write_text((ROOT / "course" / f"{nb}.py").read_text())
    for measured in ("notebook_times.json", "setup_times.json"):
        f = f"workshop_lessons/reference/{measured}"
        (tmp_path / f).write_text((ROOT / f).read_text())
    (tmp_path / "README.md").write_text(f"# x\n\n{m.BEGIN}\nold\n{m.END}\nrest\n")
    monkeypatch.setattr(m, "ROOT", tmp_path)
    assert m.main(check=True) == 1
    assert capsys.readouterr().out == "README.md is out of date. To fix: python scripts/make_timetable.py\n"
    m.main(check=False)
    assert m.main(check=True) == 0
    assert (tmp_path / "README.md").read_text().endswith(f"{m.END}\nrest\n")


def test_the_learner_notebooks_ci_executes_are_those_whose_blank_answers_change_later_cells(tmp_path, monkeypatch):
    """`make_course.diverges`: a learner notebook runs otherwise than its solution where a later cell reads what an
    answer binds or changes, other than through a lesson function that takes a blank answer (`BLANK_AWARE`, tested
    blank in tests/test_lessons_zero_stages.py) or as `ANSWER or "..."`. None does now: scripts/test.sh executes the
    solutions only, and would execute such a learner notebook beside its solution."""
    import jupytext

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import make_course

    assert [p.stem for p in sorted((ROOT / "solutions").glob("[0-9]*.py")) if make_course.diverges(p)] == []
    assert make_course.bound(
        "a = 1\nd['k'] = 2\nruns.append(3)\nimport numpy as np\n%time x.y.z = 4\ndef f(): pass"
    ) == {"a", "d", "runs", "np", "f"}
    assert make_course.reads("t = beside_prediction(MY_X, m)\nprint(MY_Y or '-')\nfor n in N: print(n, MY_Z)") == {
        "beside_prediction",
        "m",
        "print",
        "N",
        "MY_Z",
    }
    cells = ["import json\nx = []", "x.append(1)\njson.dumps(1)", "print(len(x), json.dumps(x))"]
    tag = ' tags=["solution"]'
    nb = jupytext.reads("".join(f"# %%{tag * (i == 1)}\n{c}\n\n" for i, c in enumerate(cells)), fmt="py:percent")
    jupytext.write(nb, tmp_path / "nb.py", fmt="py:percent")
    assert make_course.diverges(tmp_path / "nb.py")  # x is the answer's; json (imported) is not
    nb.cells[2].source = "print(json.dumps(1), lessons.beside_prediction(x, {}))"
    jupytext.write(nb, tmp_path / "nb.py", fmt="py:percent")
    assert not make_course.diverges(tmp_path / "nb.py")


def test_a_learner_notebook_says_its_tables_show_the_gpu_reference_only_where_they_do():
    """Statement 6 of issue 39: make_course's note "the tables show your own runs beside the GPU reference" stands
    only in learner notebooks that show reference runs; 00, 03b and 03d show none."""
    beside = "the tables show your own runs beside the GPU reference"
    says = {p.stem for p in sorted((ROOT / "course").glob("[0-9]*.py")) if beside in p.read_text()}
    assert says.isdisjoint({"00_setup", "03b_the_fine_tuned_model", "03d_failure_drills"})
    for name in says:
        text = (ROOT / "course" / f"{name}.py").read_text()
        assert any(
            s in text for s in ("lessons.reference", "lessons.REFERENCE", "REFERENCE_DIR", "reference runs are shown")
        ), name


def test_every_exercise_a_notebook_names_is_one_of_its_questions():
    """Statement 10 of issue 39 (02 promised an exercise on several GPUs it did not have), as a check: every
    "exercise N" a notebook's text names is a numbered question ("# N. ...") of that notebook."""
    for nb in sorted((ROOT / "solutions").glob("[0-9]*.py")):
        text = nb.read_text()
        named = {int(n) for n in re.findall(r"\b[Ee]xercises? (\d+)\b", text)}
        asked = {int(n) for n in re.findall(r"^# (\d+)\. ", text, re.M)}
        assert named <= asked, (nb.name, sorted(named - asked))


def test_the_timetable_counts_printed_text_every_question_and_the_several_gpu_time(tmp_path):
    """Issue 61, item 6: the timetable counted prose only, one question per numbered item and 04's one-GPU time.
    Here the printed words (a GPU run's where one recorded them, else the CPU's) are read beside the prose, every
    question mark of an exercise cell counts, and a notebook timed on several GPUs takes that time."""
    m = make_timetable()
    (tmp_path / "course").mkdir()
    (tmp_path / "workshop_lessons/reference").mkdir(parents=True)
    exercise = '# %% [markdown] tags=["exercise"]\n# 1. Why? And how?\n# 2. Say when.\n# 3. Write it down.\n'
    for nb in m.CORE + m.OPTIONAL:
        (tmp_path / "course" / f"{nb}.py").write_text(f"# %% [markdown]\n# {'word ' * 100}\n\n{exercise}")
    entry = lambda s, words=None: {"seconds": s, "returncode": 0, "output_words": words}  # noqa: E731
    times = {
        "NVIDIA H100 80GB HBM3": {nb: entry(60, 400 if nb == "01_baseline" else None) for nb in m.CORE + m.OPTIONAL},
        "2 x NVIDIA H100 80GB HBM3": {"04_multi_gpu": entry(420)},
        "cpu (x86_64, 2 cores)": {nb: entry(30, 1000) for nb in m.CORE + m.OPTIONAL},
    }
    (tmp_path / "workshop_lessons/reference/notebook_times.json").write_text(json.dumps(times))
    rows = {r["notebook"]: r for r in m.rows(tmp_path)}
    assert {r["questions"] for r in rows.values()} == {3}  # 2 question marks, 3 numbered items: the items
    assert (rows["01_baseline"]["output"], rows["01_baseline"]["output_on"]) == (400, "GPU")
    assert (rows["02_zero_stages"]["output"], rows["02_zero_stages"]["output_on"]) == (1000, "CPU")
    assert rows["02_zero_stages"]["reading"] == math.ceil((100 + 1000) / m.WORDS_PER_MINUTE)
    assert (rows["04_multi_gpu"]["gpu"], rows["03_cpu_offload"]["gpu"]) == (7, 1)
    assert rows["02_zero_stages"]["total"] == 6 + 1 + 3 * m.MINUTES_PER_QUESTION
    (tmp_path / "course/00_setup.py").write_text(exercise.replace("Write it down.", "Which? When? Where? Who?"))
    assert m.questions(tmp_path / "course/00_setup.py") == 6
    del times["cpu (x86_64, 2 cores)"]["03_cpu_offload"]["output_words"]
    (tmp_path / "workshop_lessons/reference/notebook_times.json").write_text(json.dumps(times))
    with pytest.raises(SystemExit, match="No printed words recorded for 03_cpu_offload. To fix: python scripts/time_"):
        m.table(tmp_path)
