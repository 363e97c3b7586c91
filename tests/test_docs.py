"""Figures in the docs come from committed runs: the README's H100 excerpt and docs/h100/report.csv must
match the results.json files they were made from."""

import json
import re
from pathlib import Path

import pandas as pd

from workshop_lib.results import exercise_table, load_results

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "docs" / "h100"


def test_h100_report_is_regenerated_from_the_committed_runs():
    table = exercise_table(load_results(H100 / "runs"))
    committed = pd.read_csv(H100 / "report.csv")
    assert len(table) == len(committed) == 16
    assert list(table["samples/s"]) == list(committed["samples/s"])
    assert list(table["GPU peak MiB"]) == list(committed["GPU peak MiB"])


def test_readme_excerpt_matches_the_runs():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (baseline|stage2|stage2_offload|stage3_offload) \| ([\d.]+) \| ([\d,]+) \|", readme, re.M)
    assert len(rows) == 4
    for exp, sps, peak in rows:
        r = json.loads((H100 / "runs" / f"bloom-560m-classic-{exp}" / "results.json").read_text())
        assert abs(float(sps) - r["train_samples_per_second"]) < 0.06
        assert abs(int(peak.replace(",", "")) - r["gpu_peak_mib"]) < 1
