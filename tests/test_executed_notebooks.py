"""What a learner sees in every notebook executed on the CPU: no warning, no progress bar, no widget, no traceback and
no error in any output (streams, results and displays: their text, HTML included, and their kind) but the errors a cell
exists to show (tagged raises-exception: 03c's out-of-memory refusals). scripts/test.sh executes the notebooks (nbmake
--overwrite keeps the outputs), then runs this file on its own. The learner's cells are course/NAME.ipynb's where it was
executed (it runs otherwise than its solution: `make_course.py --diverging`), else solutions/NAME.ipynb's but the
answers (the same cells in the same state); a notebook executed neither way is skipped."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Python's warnings, loggers' WARNING lines, tqdm's bars (as text, or as a widget's fallback text), tracebacks
NOISE = re.compile(r"Warning\b|WARNING|\d+%\||Traceback \(most recent call last\)")


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "solutions").glob("[0-9]*.py")))
def test_an_executed_learner_notebook_shows_no_warning_bar_or_error(name):
    for folder in ("course", "solutions"):
        path = ROOT / folder / f"{name}.ipynb"
        cells = json.loads(path.read_text())["cells"] if path.is_file() else []
        outputs = [
            (i, o)
            for i, c in enumerate(cells)
            for o in c.get("outputs", [])
            if "solution" not in c.get("metadata", {}).get("tags", [])
            and not ("raises-exception" in c.get("metadata", {}).get("tags", []) and o["output_type"] == "error")
        ]
        if outputs:
            break
    else:
        pytest.skip(f"{name} was not executed here")
    for i, o in outputs:
        data = [v for k, v in o.get("data", {}).items() if k.startswith("text/")]  # text/plain, text/html, ...
        text = "\n".join(
            t if isinstance(t, str) else "".join(t) for t in [o.get("text", ""), *data, *o.get("traceback", [])]
        )
        noise = [line for line in text.splitlines() if NOISE.search(line)]
        # a widget's text/plain is read as the rest: a progress bar's ("0%|") is noise, 03c's explorer is not
        assert o["output_type"] != "error" and not noise, (i, o.get("ename"), noise)


def test_notebook_03e_decision_table_is_made_of_its_own_runs():
    """03e executed on this machine: the decision table it wrote (decision.csv) is `fsdp.decision` of the runs beside
    it; the collectives come from its own two-rank runs, and each reduce-scattered every gradient once a step
    (Ψ) and gathered every parameter at least once."""
    import pandas as pd

    from workshop_lessons import fsdp
    from workshop_lessons.multi_gpu import COMM_TOLERANCE

    runs = ROOT / "solutions" / "runs" / "03e_zero3_or_fsdp2"
    if not (runs / "decision.csv").is_file():
        pytest.skip("03e_zero3_or_fsdp2 was not executed here")
    written = pd.read_csv(runs / "decision.csv", dtype=str, keep_default_na=False)
    rows = fsdp.decision(runs)
    assert written.equals(fsdp.decision_table(rows).astype(str))
    assert rows[-1].source == "your runs"
    t = fsdp.collective_table(runs).set_index("collective")
    for name in ("ZeRO-3", "FSDP2"):
        assert abs(t.at["reduce_scatter_tensor", f"{name} volume (Ψ)"] - 1) <= COMM_TOLERANCE
        assert t.at["all_gather_into_tensor", f"{name} volume (Ψ)"] >= 1 - COMM_TOLERANCE
