"""`Comparison` and `compare(...)`: one figure against another (a run against the baseline, or against its
reference), the measured band that decides, and the verdict: "higher", "lower" or "within the band". The lesson
modules return these records; the solution notebooks write the sentences from them. Also the tables and figures
several notebooks share: a prediction beside its measurement, GPU results (the learner's or the reference's)."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from workshop_lib import results
from workshop_lib.units import MiB

from .references import band, reference

Verdict = Literal["higher", "lower", "equal", "within the band"]


@dataclass(frozen=True)
class Comparison:
    """`value` against `other`, one metric in one unit (MiB, tokens/s, s, nats, a fraction for MFU), and
    the verdict. `band` is the relative spread measured between two runs of one configuration (`band()`), a
    fraction; a difference no larger than it is "within the band" (noise, not a finding). None: no band was
    measured for this metric, and the verdict is the plain "higher" / "lower" / "equal"."""

    metric: str
    unit: str
    value: float
    other: float
    band: float | None = None

    @property
    def ratio(self) -> float:
        """value / other (NaN where other is 0)."""
        return self.value / self.other if self.other else float("nan")

    @property
    def difference(self) -> float:
        """value - other, in `unit`."""
        return self.value - self.other

    @property
    def spread(self) -> float:
        """|value - other| / mean(value, other), a fraction: what the band is measured in."""
        mean = (abs(self.value) + abs(self.other)) / 2
        return abs(self.value - self.other) / mean if mean else 0.0

    @property
    def verdict(self) -> Verdict:
        if self.band is not None and self.spread <= self.band:
            return "within the band"
        return "higher" if self.value > self.other else "lower" if self.value < self.other else "equal"

    def figure(self, x: float) -> str:
        """`x` in `unit` as the course writes it: whole units with thousands separators from 100 up ("10,114 MiB"),
        three significant figures below ("1.39 Ψ")."""
        return f"{x:,.0f} {self.unit}" if abs(x) >= 100 else f"{x:.3g} {self.unit}"

    @property
    def band_text(self) -> str:
        """ "±8.7%", or "no band measured"."""
        return f"±{self.band:.1%}" if self.band is not None else "no band measured"

    def _with_verdict(self, figure: str) -> str:
        if self.verdict == "within the band":
            return f"{figure}, within the band ({self.band_text}): the same within the noise"
        return f"{figure} ({self.verdict}; band {self.band_text})"

    @property
    def ratio_text(self) -> str:
        """The ratio and the verdict, naming the band: "1.02x, within the band (±8.7%): the same within the
        noise", or "0.36x (lower; band ±8.7%)"."""
        return self._with_verdict(f"{self.ratio:.2f}x")

    @property
    def difference_text(self) -> str:
        """The difference in `unit` and the verdict, naming the band: "+0.912 nats (higher; band ±0.6%)", "+8,761 MiB
        (higher; band ±9.3%)", or "+0.001 nats, within the band (±0.6%): the same within the noise"."""
        d = self.difference
        return self._with_verdict((f"{d:+,.0f} {self.unit}" if abs(d) >= 100 else f"{d:+.3g} {self.unit}").rstrip())


def compare(
    metric: str,
    value: float,
    other: float,
    unit: str | None = None,
    noise: float | None | Literal["reference"] = "reference",
) -> Comparison:
    """`value` against `other` for results.json's `metric`: its unit from `results.COLUMNS` unless given, and
    as band the spread measured on the reference runs (`band(metric)`) unless `noise` gives one (None: none)."""
    spread = band(metric) if noise == "reference" else noise
    unit = unit or (results.COLUMNS[metric].unit if metric in results.COLUMNS else "")
    return Comparison(metric, unit, float(value), float(other), None if spread is None else float(spread))


def beside_prediction(predicted: dict[str, float | None], measured: dict[str, float], unit: str) -> pd.DataFrame:
    """A prediction exercise's table: per name of `measured`, the learner's prediction and the measurement (both in
    `unit`), and measured / predicted; "not written" where the prediction is None or missing."""
    rows = []
    for name, m in measured.items():
        p = predicted.get(name)
        rows.append(
            {
                "run": name,
                f"your prediction ({unit})": "not written" if p is None else p,
                f"measured ({unit})": round(m, 2),
                "measured / predicted": f"{m / p:.2f}x" if p else "n/a",
            }
        )
    return pd.DataFrame(rows)


def gpu_results(
    notebook: str, runs: str | Path, names: list[str], key: str = "gpu_states_allocated_mib"
) -> tuple[dict[str, dict], str]:
    """results.json of the runs `names` in `runs` where every one finished and measured GPU memory (`key`), else of
    `notebook`'s GPU reference runs of the same names, those it has (a CPU's memory is the whole process's:
    00_setup); and which of the two it is ("your runs", "the GPU reference")."""
    files = [Path(runs) / n / "results.json" for n in names]
    mine = {n: json.loads(f.read_text()) for n, f in zip(names, files) if f.is_file()}
    if len(mine) == len(names) and all(r.get(key) is not None for r in mine.values()):
        return mine, "your runs"
    ref = reference(notebook)
    return {n: ref.loc[n].to_dict() for n in names if n in ref.index}, "the GPU reference"


def states_per_param(notebook: str, runs: str | Path, names: list[str]) -> tuple[dict[str, float], str]:
    """Model states on the GPU per parameter, bytes (`gpu_states_allocated_mib` x MiB / `num_params`), of the runs
    `names` as `gpu_results` picks them; and which runs they are."""
    rows, source = gpu_results(notebook, runs, names)
    return {n: r["gpu_states_allocated_mib"] * MiB / r["num_params"] for n, r in rows.items()}, source
