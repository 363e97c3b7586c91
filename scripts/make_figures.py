"""Write the figures the docs and the lab's findings state, computed from the runs' own files (results.json,
bench.csv, train_log.csv, profiles, logs), between markers in each page: its figures table between
`<!-- figures -->` and `<!-- /figures -->` (the text names a figure by its key, in brackets, and types no figure of
its own), and each measured table the page shows between `<!-- NAME -->` and `<!-- /NAME -->`. A notebook's
figures (solutions/03b and 03c, whose learner versions scripts/make_course.py writes) stand inline between
`<!--fig:NAME-->` and `<!--/fig:NAME-->` (hidden in the rendered markdown; one word with its figure, so the
notebook's word count, scripts/make_timetable.py's, holds), from the code's constants and the
reference runs. CI checks that every page is current (`python scripts/make_figures.py --check`); change the runs or this script, never the tables.
The tests test the data (tests/test_docs.py, lab/tests/test_findings.py), not the sentences.

    python scripts/make_figures.py            # write every page's tables
    python scripts/make_figures.py --check    # exit 1 if a page's tables differ from what would be written
"""

import json
import re
import statistics
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # run as a script or loaded by a test
from generated import write_or_check  # noqa: E402

from workshop_lib.results import title  # noqa: E402

FINDINGS = ROOT / "lab" / "findings" / "h100"
REF = ROOT / "workshop_lessons" / "reference"
CAPTION = (
    "Each figure the text names in brackets, computed from the files beside this page by "
    "`python scripts/make_figures.py` (CI's `--check` fails when a page differs from its files)."
)


class Page:
    """A page's figures ({key: value}, in order) and measured tables ({name: markdown lines})."""

    def __init__(self):
        self.figures, self.tables, self.inline = {}, {}, {}

    def __call__(self, key: str, value: str) -> None:
        assert key not in self.figures and "|" not in key and "]" not in key, key
        self.figures[key] = value

    def table(self, name: str, header: list[str], rows: list[list[str]]) -> None:
        self.tables[name] = [
            "| " + " | ".join(header) + " |",
            "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(map(str, r)) + " |" for r in rows),
        ]

    def blocks(self) -> dict[str, str]:
        out = {name: "\n".join(lines) for name, lines in self.tables.items()}
        if self.figures:
            rows = [f"| [{k}] | {v} |" for k, v in self.figures.items()]
            out["figures"] = "\n".join([CAPTION, "", "| figure | value |", "| --- | --- |", *rows])
        return out


# --- the runs' files -------------------------------------------------------------------------------------------


def window_tokens_per_second(run: Path) -> float:
    """All the tokens of a run's steady steps over their summed step times (train_log.csv, results.json's warm-up)."""
    log = pd.read_csv(run / "train_log.csv").dropna(subset=["step_time_s"])
    steady = log.iloc[json.loads((run / "results.json").read_text())["warmup_steps"] :]
    return steady["tokens"].sum() / steady["step_time_s"].sum()


def band_then() -> float:
    """The tokens/s band (`lessons.band`'s largest spread between a course reference run and its repeat) as the
    findings recorded before 2026-11-26 took it: each run's figure under the definition of the time, the median of
    the steps' own tokens/s after the 8 warm-up steps its results.json held, computed again from its train_log.csv
    (results.json now holds today's figure, `metrics.steady_state`; scripts/restate_steady.py)."""
    import workshop_lessons as lessons

    def median_step(run: Path) -> float:
        steady = pd.read_csv(run / "train_log.csv").dropna(subset=["step_time_s"]).iloc[8:]
        return statistics.median(steady["tokens"] / steady["step_time_s"])

    root = lessons.REFERENCE / "h100" / "course"  # the course reference of that time
    repeated = sorted(d.name for d in (root / "repeat").iterdir() if (d / "results.json").is_file())
    spreads = [
        abs(a - b) / ((a + b) / 2)
        for a, b in ((median_step(root / "runs" / n), median_step(root / "repeat" / n)) for n in repeated)
    ]
    return max(spreads)


def profile(path: Path) -> tuple[list[list[float]], dict, dict]:
    """profile_steps.py's profile.txt: its per-step lines ([wall, GPU busy, copies, forward, backward, step] ms each)
    and its two operator tables ({name: {column: cell}}, by GPU time and by CPU time, first row of a name kept)."""
    text = path.read_text()
    steps = [
        [float(v) for v in re.findall(r"([\d.]+) ms", line)]
        for line in text.splitlines()
        if re.match(r"step \d+: wall", line)
    ]

    def table(section: str) -> dict:
        lines = [
            line
            for line in text.split(section)[1].split("\n\n")[0].splitlines()
            if line.strip() and not line.startswith("-")
        ]
        head, rows = re.split(r"\s{2,}", lines[0].strip()), {}
        for line in lines[1:]:
            cells = re.split(r"\s{2,}", line.strip())
            if len(cells) == len(head):
                rows.setdefault(cells[0], dict(zip(head, cells)))
        return rows

    return steps, table("by GPU time\n"), table("by CPU time\n")


def ms(cell: str) -> float:
    """A profiler table's time cell in ms: "1.2s", "3.4ms", "5.6us"."""
    number, unit = re.fullmatch(r"([\d.]+)(s|ms|us)", cell).groups()
    return float(number) * {"s": 1e3, "ms": 1.0, "us": 1e-3}[unit]


def gpu_total_ms(path: Path) -> float:
    return float(re.search(r"Self CUDA time total: ([\d.]+)ms", path.read_text()).group(1))


def steady_median(run: Path, col: str = "forward_ms") -> float:
    """The median of `col` over a run's steady steps (after its `warmup_steps`): `forward_ms` over the steady
    micro-batches of micro_batches.csv, any other column over the logged steps of train_log.csv."""
    warm = json.loads((run / "results.json").read_text())["warmup_steps"]
    if col == "forward_ms":
        mb = pd.read_csv(run / "micro_batches.csv")
        return mb[mb["step"] > warm][col].median()
    return pd.read_csv(run / "train_log.csv").dropna(subset=[col])[col].iloc[warm:].median()


def steady_line(log: Path) -> tuple[float, float]:
    """(steady tokens/s, GPU peak MiB) from the summary line a `workshop run` prints last."""
    m = re.findall(r"([\d,]+) tokens/s and [\d.]+ questions/s steady, ([\d,]+) MiB GPU peak", log.read_text())[-1]
    return tuple(float(x.replace(",", "")) for x in m)


def tokens(d: Path, pattern: str = "*/*/results.json") -> dict:
    return {
        p.parent.relative_to(d).as_posix(): json.loads(p.read_text())["steady_train_tokens_per_second"]
        for p in d.glob(pattern)
    }


def x(v: float, digits: int = 2) -> str:
    return f"{v:.{digits}f}x"


def n(v: float) -> str:
    return f"{v:,.0f}"


def scaling_rows(d: Path, part: str | None = None) -> list[list[str]]:
    """A reference's scaling table (`scaling_table`), stage2 and stage3: [(part,) experiment, 1 GPU, 2 GPUs, eff]."""
    from workshop_lib.results import load_results, scaling_table

    st = scaling_table(load_results(d)).set_index(["experiment", "GPUs"])
    tps = st[title("steady_train_tokens_per_second")]
    return [
        [*([part] if part else []), e, n(tps[(e, 1)]), n(tps[(e, 2)]), st.at[(e, 2), "scaling efficiency"]]
        for e in ("stage2", "stage3")
    ]


SCALING = ["experiment", "1 GPU tokens/s", "2 GPUs tokens/s", "scaling efficiency"]


def bucket_ab_table(p: Page, d: Path | None = None) -> None:
    from workshop_lessons import multi_gpu

    ab = multi_gpu.bucket_ab(d) if d else multi_gpu.bucket_ab()
    p.table(
        "bucket-ab",
        ["pair", "small buckets tokens/s", "recipe's buckets tokens/s", "ratio", "verdict"],
        [[part, n(c.value), n(c.other), x(c.ratio), c.verdict] for part, c in zip(("runs", "repeat"), ab)],
    )
    p("bucket A/B band", ab[0].band_text)
    folder = d or multi_gpu.BUCKET_AB
    peak = multi_gpu.bucket_ab(folder, "gpu_peak_allocated_mib")
    p("small buckets peak allocated MiB less", " and ".join(f"{-c.difference:,.0f}" for c in peak))
    for run, name in (("stage2-small-buckets", "small"), ("stage2-recipe-buckets", "recipe's")):
        r = next(folder.glob(f"*/{run}"))
        b = multi_gpu.buckets(
            json.loads((r / "ds_config.json").read_text()), json.loads((r / "results.json").read_text())["num_params"]
        )
        p(f"{name} buckets", str(b.count))
        p(f"{name} bucket MiB", f"{b.bucket_mib:.0f}")


def targets(p: Page, z2_ceiling, z3_z2, offload_z2, extra=("", "", ""), header="measured", offload="offload", more=()):
    """Issue 26's three targets (and `more`: (target, ratio, at least) rows), as the bench findings table them."""
    rows = [
        ("default ZeRO-2 at least 0.9x of the plain PyTorch ceiling", z2_ceiling, 0.9, extra[0]),
        ("default ZeRO-3 at least 0.6x of default ZeRO-2", z3_z2, 0.6, extra[1]),
        (f"the fastest {offload} row at least 0.7x of default ZeRO-2", offload_z2, 0.7, extra[2]),
        *((t, v, least, "") for t, v, least in more),
    ]
    p.table(
        "targets",
        [header.split(" | ")[0] if " | " in header else "target", header.split(" | ")[-1], "met"],
        [[t, x(v) + e, _met(v, least)] for t, v, least, e in rows],
    )


def _met(v: float, target: float) -> str:
    return "yes" if round(v, 2) >= target else "no"


# --- the pages -------------------------------------------------------------------------------------------------


def bench(p: Page) -> None:
    from lab.bench import run_dir_name

    d = FINDINGS / "bench"
    w = pd.read_csv(d / "bench.csv").set_index("row")["window tokens/s"]
    z2, z3, off = w["default ZeRO-2"], w["default ZeRO-3"], w["default ZeRO-2 + CPU offload"]
    acc4 = w["A/B: ZeRO-2 + CPU offload, 4 x 32k tokens (accumulation 4)"]
    targets(
        p,
        z2 / w["plain PyTorch (ceiling)"],
        z3 / z2,
        acc4 / z2,
        (
            f"; the three levers together {x(w['A/B: ZeRO-2, all three'] / w['plain PyTorch (ceiling)'])}",
            "",
            f" (accumulation 4: four times the global batch); {x(off / z2)} at the same global batch",
        ),
        header="measured (window tokens/s)",
    )
    p("band", f"±{100 * band_then():.0f}%")
    for row, key in {
        "no gradient norm (max_grad_norm 0: no clipping)": "no gradient norm",
        "overlap_comm off (one GPU)": "overlap_comm off",
        "no per-step host syncs (logging every 8 steps)": "no per-step host syncs",
        "all three": "all three",
        "2 data loader workers": "2 data loader workers",
        "bf16 overflow check (DeepSpeed's default)": "overflow check back on",
    }.items():
        p(f"{key} / ZeRO-2", x(w[f"A/B: ZeRO-2, {row}"] / z2))
    p("persistent / ZeRO-3", x(w["A/B: ZeRO-3, every parameter persistent (one GPU)"] / z3))
    p("torch.compile / ZeRO-3", x(w["A/B: ZeRO-3, torch.compile"] / z3))
    p("bound / offload", x(w["A/B: ZeRO-2 + CPU offload, cores bound (DeepSpeed's --bind_cores_to_rank)"] / off))
    p("accumulation 4 / offload", x(acc4 / off))
    p("all three / ceiling", x(w["A/B: ZeRO-2, all three"] / w["plain PyTorch (ceiling)"]))
    pk = Page()
    packed(pk)
    p("packed: ceiling", pk.figures["packed ceiling / ceiling"].replace("x or ", "-"))
    p("packed: ZeRO-2 after the fix", pk.figures["after the fix: packed / default"])
    p("packed: ZeRO-2 / unpacked ceiling", pk.figures["after the fix: packed / ceiling"])
    # where ZeRO-2's step goes: the two profiles
    got = {}
    for name in ("default", "levers"):
        path = d / "profile" / name / "profile.txt"
        _, by_gpu, by_cpu = profile(path)
        row = by_cpu | by_gpu
        norms = row.get("aten::linalg_vector_norm")
        got[name] = {
            "gpu": gpu_total_ms(path) / 3,
            "acc": ms(row["torch::autograd::AccumulateGrad"]["CPU total"]) / 3,
            "calls": int(row["torch::autograd::AccumulateGrad"]["# of Calls"]) // 3,
            "collate": ms(row["enumerate(DataLoader)#_SingleProcessDataLoaderIter._..."]["CPU total"]) / 3,
            "norms": int(norms["# of Calls"]) // 3 if norms else 0,
        }
    dd, lv = got["default"], got["levers"]
    ceiling = pd.read_csv(d / "bench.csv").set_index("row").loc["plain PyTorch (ceiling)", title("steady_step_time_s")]
    p("GPU kernels ms, default", f"{dd['gpu']:.1f}")
    p("GPU kernels ms, levers", f"{lv['gpu']:.1f}")
    p("ceiling step ms", f"{1000 * ceiling:.0f}")
    p("gradient norms per step", str(dd["norms"]))
    p("AccumulateGrad calls per step", str(dd["calls"]))
    p("AccumulateGrad host ms, default", f"{dd['acc']:.1f}")
    p("AccumulateGrad host ms, levers", f"{lv['acc']:.1f}")
    p("collation ms, default", f"{dd['collate']:.1f}")
    p("collation ms, levers", f"{lv['collate']:.1f}")
    _ = run_dir_name
    zero3_offload_summary(p, liger=True)


def bench_profiles(p: Page, calls: bool = False) -> None:
    """The bench's two profiles' AccumulateGrad host time (default ZeRO-2 and its levers), as other pages cite it."""
    other = Page()
    bench(other)
    acc = [float(other.figures[f"AccumulateGrad host ms, {k}"]) for k in ("default", "levers")]
    p("AccumulateGrad host ms, bench profiles", f"{min(acc):.0f}-{max(acc):.0f}")
    if calls:
        p("AccumulateGrad calls per step, bench", other.figures["AccumulateGrad calls per step"])


def zero3_offload_summary(p: Page, liger: bool = False) -> None:
    """bench-zero3-offload's figures that the bench's and the peers' READMEs summarise."""
    f = zero3_offload()
    p("ZeRO-3's GPU work / ZeRO-2's", f["work"])
    p("offload's bound / ZeRO-2", f["bound"])
    if liger:
        p("Liger / ZeRO-3", f["liger"])


def zero3_offload() -> dict:
    from lab.bench import LIGER_LAYERS, run_dir_name

    d = FINDINGS / "bench-zero3-offload"
    prof = {k: profile(d / "profile" / k / "profile.txt") for k in ("stage2", "stage3", "stage2_offload")}
    mean = lambda k, i: statistics.mean(s[i] for s in prof[k][0])  # noqa: E731
    bound = mean("stage2", 0) - mean("stage2", 5) + mean("stage2_offload", 5)
    tps = pd.read_csv(d / "bench.csv").set_index("row")[title("steady_train_tokens_per_second")]
    _ = run_dir_name
    return {
        "work": f"{mean('stage3', 1) / mean('stage2', 1):.1f}",
        "bound": x(mean("stage2", 0) / bound),
        "liger": x(tps[LIGER_LAYERS] / tps["default ZeRO-3"]),
    }


def bench_zero3_offload(p: Page) -> None:
    from lab.bench import LIGER_LAYERS

    d = FINDINGS / "bench-zero3-offload"
    names = {
        "stage2": "default ZeRO-2",
        "stage3": "default ZeRO-3",
        "stage3-liger": "ZeRO-3, Liger-Kernel's layers",
        "stage2_offload": "ZeRO-2 + CPU offload",
    }
    prof = {k: profile(d / "profile" / k / "profile.txt") for k in names}
    p.table(
        "profiles",
        ["profile", "wall", "GPU busy", "host in engine.forward", "host in engine.backward", "host in engine.step"],
        [
            [names[k], *(f"{min(c):.1f}-{max(c):.1f}" for i, c in enumerate(zip(*steps)) if i != 2)]
            for k, (steps, _, _) in prof.items()
        ],
    )
    gpu = lambda k, op: f"{ms(prof[k][1][op]['Self CUDA']) / 3:.1f}"  # noqa: E731 - per step
    cpu = lambda k, op, col="Self CPU": f"{ms(prof[k][2][op][col]) / 3:.1f}"  # noqa: E731
    calls = lambda k, table, op: str(int(prof[k][table][op]["# of Calls"]) // 3)  # noqa: E731
    for op in ("aten::mm", "aten::mul", "aten::copy_", "aten::add_", "aten::sum", "aten::pow"):
        p(f"{op} GPU ms, ZeRO-3", gpu("stage3", op))
    p("aten::mm GPU ms, ZeRO-2", gpu("stage2", "aten::mm"))
    p("aten::copy_ GPU ms, Liger", gpu("stage3-liger", "aten::copy_"))
    p("aten::add_ GPU ms, Liger", gpu("stage3-liger", "aten::add_"))
    p("pre-backward hooks ms, Liger", cpu("stage3-liger", "PreBackwardFunctionForModuleBackward"))
    p("post-backward hooks ms, Liger", cpu("stage3-liger", "PostBackwardFunctionModuleBackward"))
    p("AccumulateGrad ms, Liger", cpu("stage3-liger", "torch::autograd::AccumulateGrad", "CPU total"))
    p("LigerRopeFunction ms", cpu("stage3-liger", "LigerRopeFunction"))
    p("LigerRopeFunctionBackward ms", cpu("stage3-liger", "LigerRopeFunctionBackward"))
    p("LigerRopeFunction calls", calls("stage3-liger", 2, "LigerRopeFunction"))
    o = "stage2_offload"
    p("DeepSpeedCPUAdam ms", cpu(o, "Optimizer.step#DeepSpeedCPUAdam.step"))
    p("aten::mul_ calls, offload", calls(o, 2, "aten::mul_"))
    p("aten::mul_ ms, offload", cpu(o, "aten::mul_"))
    up, down = "Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pinned)"
    p("host-to-device ms", gpu(o, up))
    p("host-to-device copies", calls(o, 1, up))
    p("device-to-host copies", calls(o, 1, down))
    p("device-to-host ms", gpu(o, down))
    p("AccumulateGrad ms, offload", cpu(o, "torch::autograd::AccumulateGrad", "CPU total"))
    mean = lambda k, i: statistics.mean(s[i] for s in prof[k][0])  # noqa: E731
    bound = mean("stage2", 0) - mean("stage2", 5) + mean(o, 5)
    p("ZeRO-2 step ms", f"{mean('stage2', 0):.1f}")
    p("ZeRO-2 optimizer step ms", f"{mean('stage2', 5):.1f}")
    p("offload optimizer step ms", f"{mean(o, 5):.1f}")
    p("offload bound ms", f"{bound:.1f}")
    p("offload bound / ZeRO-2", x(mean("stage2", 0) / bound))
    ratio = lambda k, i, k2="stage2": f"{mean(k, i) / mean(k2, i):.1f}"  # noqa: E731 - of the table's means
    p("ZeRO-3's GPU busy / ZeRO-2's", ratio("stage3", 1))
    p("Liger's GPU busy / ZeRO-2's", ratio("stage3-liger", 1))
    p("Liger's engine.forward host / ZeRO-2's", ratio("stage3-liger", 3))
    p("Liger's engine.backward host / ZeRO-2's", ratio("stage3-liger", 4))
    p("offload's GPU busy / wall", f"{mean(o, 1) / mean(o, 0):.0%}")
    p("offload's engine.step host / ZeRO-2's", ratio(o, 5))
    p("offload's engine.backward host / ZeRO-2's", ratio(o, 4))
    p("band", f"±{100 * band_then():.0f}%")
    w = pd.read_csv(FINDINGS / "bench" / "bench.csv").set_index("row")["window tokens/s"]
    p("persistent / ZeRO-3, bench", x(w["A/B: ZeRO-3, every parameter persistent (one GPU)"] / w["default ZeRO-3"]))
    p("torch.compile / ZeRO-3, bench", x(w["A/B: ZeRO-3, torch.compile"] / w["default ZeRO-3"]))
    acc4 = w["A/B: ZeRO-2 + CPU offload, 4 x 32k tokens (accumulation 4)"]
    p("accumulation 4 / offload, bench", x(acc4 / w["default ZeRO-2 + CPU offload"]))
    tps = pd.read_csv(d / "bench.csv").set_index("row")
    rate, z2, z3 = tps[title("steady_train_tokens_per_second")], "default ZeRO-2", "default ZeRO-3"
    runs = {r: json.loads((d / "runs" / _run_dir(r) / "results.json").read_text()) for r in (z2, z3, LIGER_LAYERS)}
    lg = LIGER_LAYERS
    p("Liger tokens/s", n(rate[lg]))
    p("ZeRO-3 tokens/s", n(rate[z3]))
    p("Liger / ZeRO-3", x(rate[lg] / rate[z3]))
    p("GPU util %, ZeRO-3", f"{runs[z3]['gpu_util_pct']:.1f}%")
    p("GPU util %, Liger", f"{runs[lg]['gpu_util_pct']:.1f}%")
    p("peak allocated MiB, ZeRO-3", n(runs[z3]["gpu_peak_allocated_mib"]))
    p("peak allocated MiB, Liger", n(runs[lg]["gpu_peak_allocated_mib"]))
    p("train loss, Liger", f"{runs[lg]['train_loss']:.4f}")
    p("train loss, ZeRO-3", f"{runs[z3]['train_loss']:.4f}")
    p("ZeRO-3 / ZeRO-2", x(rate[z3] / rate[z2]))
    p("Liger / ZeRO-2", x(rate[lg] / rate[z2]))


def _run_dir(row: str) -> str:
    from lab.bench import run_dir_name

    return run_dir_name(row)


def bench_gap(p: Page) -> None:
    gap = FINDINGS / "bench-gap"
    runs = {d.name: d for d in (gap / "runs").iterdir()}
    window = {k: window_tokens_per_second(d) for k, d in runs.items()}
    table = pd.read_csv(gap / "bench.csv").set_index("row")
    z2, off = window["default_ZeRO-2"], window["default_ZeRO-2_plus_CPU_offload"]
    zf, acc4 = (
        window["A_B_ZeRO-2_plus_CPU_offload_ZenFlow"],
        window["A_B_ZeRO-2_plus_CPU_offload_4_x_32k_tokens_accumulation_4"],
    )
    ceiling = (
        table.loc["default ZeRO-2", title("steady_train_tokens_per_second")]
        / table.loc["plain PyTorch (ceiling)", title("steady_train_tokens_per_second")]
    )
    targets(
        p,
        ceiling,
        window["default_ZeRO-3"] / z2,
        max(acc4, zf, off) / z2,
        ("", "", f" (accumulation 4: four times the global batch); {x(off / z2)} at the same global batch"),
    )
    p(
        "persistent / ZeRO-3",
        x(window["A_B_ZeRO-3_every_parameter_persistent_one_GPU"] / window["default_ZeRO-3"]),
    )
    p("accumulation 4 / offload", x(acc4 / off))
    cb = {
        k: json.loads((gap / "core-binding" / k / "results.json").read_text())["steady_train_tokens_per_second"]
        for k in ("plain", "bound", "plain2")
    }
    p("unbound tokens/s", n(cb["plain"]))
    p("bound tokens/s", n(cb["bound"]))
    p("unbound again tokens/s", n(cb["plain2"]))
    p("unbound runs' ratio", x(max(cb["plain"], cb["plain2"]) / min(cb["plain"], cb["plain2"])))
    path = gap / "profile" / "profile.txt"
    _, by_gpu, by_cpu = profile(path)
    row = by_gpu | by_cpu
    per_step = lambda name: ms(row[name]["CPU total"]) / 3  # noqa: E731 - 3 steps profiled
    p("GPU kernels ms", f"{gpu_total_ms(path) / 3:.0f}")
    p("ceiling step ms", f"{1000 * table.loc['plain PyTorch (ceiling)', title('steady_step_time_s')]:.0f}")
    p("collation ms", f"{per_step('enumerate(DataLoader)#_SingleProcessDataLoaderIter._...'):.1f}")
    p("AccumulateGrad calls", str(int(row["torch::autograd::AccumulateGrad"]["# of Calls"]) // 3))
    p("AccumulateGrad ms", f"{per_step('torch::autograd::AccumulateGrad'):.1f}")
    p("gradient norms", str(int(row["aten::linalg_vector_norm"]["# of Calls"]) // 3))


def first_run(p: Page) -> None:
    d = FINDINGS / "first-run"
    for log in ("first_run", "reset"):
        rows = [line.split(maxsplit=5) for line in (d / f"{log}.log").read_text().splitlines()]
        first, later = [int(r[3]) for r in rows if r[2] == "stage2"]
        p(f"first / later, {log}.log", x(first / later))
    speed = {}
    for steps in (4, 24):
        speed[steps] = int((d / f"warm_up{steps}.log").read_text().splitlines()[1].split(maxsplit=5)[3])
        p(f"stage2 tokens/s after {steps} warm-up steps", n(speed[steps]))
    p("4 / 24 warm-up steps", x(speed[4] / speed[24]))


def deepcompile(p: Page) -> None:
    d = FINDINGS / "deepcompile"

    def steps(name):
        return [float(t) for t in re.findall(r"^step \d+: ([\d.]+) s, deepcompile", (d / name).read_text(), re.M)]

    p("first compiled step s", f"{steps('trainer_compile.log')[0]:.0f}")
    p("first step s, A/B", f"{steps('ab2_trainer_compile.log')[0]:.0f}")
    runtime = re.search(r"'train_runtime': '([\d.]+)'", (d / "ab2_key_only.log").read_text()).group(1)
    p("training s, without DeepCompile", f"{float(runtime):.1f}")
    on, off = steps("ab2_trainer_compile.log"), steps("ab2_key_only.log")
    fast, slow = statistics.median(on[1:]), statistics.median(off[4:])
    p("compiled step median s", f"{fast:.3f}")
    p("uncompiled step median s", f"{slow:.3f}")
    p("uncompiled / compiled", x(slow / fast, 1))
    p("uncompiled step range s", f"{min(off[4:]):.3f}-{max(off[4:]):.3f}")


def new_shapes(p: Page) -> None:
    d = FINDINGS / "new-shapes"
    settings = {
        "default": "the engine as it was (SDPA picks cuDNN's attention on an H100), 11 steps profiled",
        "expandable": "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`",
        "threads1": "`TORCHINDUCTOR_COMPILE_THREADS=1`",
        "flash": "SDPA's flash kernel (see below)",
    }
    median = {}
    for variant in settings:
        log = pd.read_csv(d / variant / "new_shapes.csv")
        median[variant] = log[log["step"] > 3].groupby("new_shape")["forward_ms"].median()
    p.table(
        "variants",
        ["folder", "setting", "forward ms, new shape", "forward ms, shape seen before"],
        [[f"`{v}/`", s, f"{m[True]:.1f}", f"{m[False]:.1f}"] for (v, s), m in zip(settings.items(), median.values())],
    )
    p("flash: first forward s", f"{pd.read_csv(d / 'flash' / 'new_shapes.csv')['forward_ms'].iloc[0] / 1000:.1f}")
    p("first / fourth, cuDNN", first_over_fourth(d / "cudnn-run-order"))
    p("first / fourth, flash", first_over_fourth(ROOT / "docs" / "h100" / "run-order"))
    seen = [median[v][False] for v in ("default", "flash")]
    p("default / flash, shapes seen before", f"{abs(seen[0] / seen[1] - 1):.0%}")
    text = (d / "default" / "new_shapes.txt").read_text()

    def host_ms(step, op):
        block = text[text.index(f"step {step} (shape") :]
        block = block[: block.index("Self CUDA time total")]
        found = re.search(re.escape(op) + r"\s+\S+%\s+([\d.]+)ms", block)
        total = float(re.search(r"Self CPU time total: ([\d.]+)ms", block).group(1))
        return (float(found.group(1)) if found else None), total

    bwd, total11 = host_ms(11, "aten::_cudnn_attention_backward")
    p("cuDNN attention backward host ms, step 11", f"{bwd:.1f}")
    p("cuDNN attention forward host ms, step 11", f"{host_ms(11, 'aten::_cudnn_attention_forward')[0]:.1f}")
    p("host ms, step 11", f"{total11:.1f}")
    p("host ms, step 12", f"{host_ms(12, 'aten::_cudnn_attention_backward')[1]:.1f}")


def first_over_fourth(d: Path) -> str:
    """A run-order folder's first stage2 run against its fourth (steady tokens/s)."""
    tps = {k.removeprefix("runs/"): v for k, v in tokens(d, "runs/*/results.json").items()}
    return x(tps["1-stage2"] / tps["4-stage2"])


def bench_flash(p: Page) -> None:
    tps = pd.read_csv(FINDINGS / "bench-flash" / "bench.csv").set_index("row")[title("steady_train_tokens_per_second")]
    z2 = tps["default ZeRO-2"]
    targets(
        p, z2 / tps["plain PyTorch (ceiling)"], tps["default ZeRO-3"] / z2, tps["default ZeRO-2 + CPU offload"] / z2
    )


def bench_peers(p: Page) -> None:
    d = FINDINGS / "bench-peers"
    tps = pd.read_csv(d / "bench.csv").set_index("row")[title("steady_train_tokens_per_second")]
    z2, ceiling = tps["default ZeRO-2"], tps["plain PyTorch (ceiling)"]
    hf, trl = (z2 / tps[r] for r in ["HF Trainer + ZeRO-2 + Liger", "TRL SFTTrainer + ZeRO-2 + Liger"])  # issue 42's
    more = [
        ("default ZeRO-2 at least 4x the HF Trainer row", hf, 4),
        ("default ZeRO-2 at least 6x the TRL row", trl, 6),
    ]
    targets(
        p,
        z2 / ceiling,
        tps["default ZeRO-3"] / z2,
        tps["default ZeRO-2 + CPU offload"] / z2,
        offload="CPU-offload",
        more=more,
    )
    before = pd.read_csv(d / "ceiling-after-peers" / "bench.csv").set_index("row")[
        title("steady_train_tokens_per_second")
    ]
    log = (d / "ceiling-after-peers" / "log_headers_and_compile_errors.txt").read_text().splitlines()
    p("CompilationError warnings", str(sum("CompilationError" in line for line in log)))
    p("ceiling after the peers tokens/s", n(before["plain PyTorch (ceiling)"]))
    p("ceiling tokens/s", n(ceiling))
    p("ZeRO-2 before tokens/s", n(before["default ZeRO-2"]))
    p("ZeRO-2 tokens/s", n(z2))
    spread = abs(z2 - before["default ZeRO-2"]) / ((z2 + before["default ZeRO-2"]) / 2)
    p("ZeRO-2 spread", f"{spread:.1%}")
    zero3_offload_summary(p)
    w = pd.read_csv(FINDINGS / "bench" / "bench.csv").set_index("row")["window tokens/s"]
    p("torch.compile / ZeRO-3, bench", x(w["A/B: ZeRO-3, torch.compile"] / w["default ZeRO-3"]))


def bench_prefetch(p: Page) -> None:
    tps = pd.read_csv(ROOT / "lab/findings/h200/bench-prefetch/bench.csv").set_index("row")[
        title("steady_train_tokens_per_second")
    ]
    z2 = tps["default ZeRO-2"]
    p.table(
        "targets",
        ["target", "measured", "met"],
        [
            ["default ZeRO-2 at least 0.9x of the plain PyTorch ceiling", x(z2 / tps["plain PyTorch (ceiling)"]), "no"],
            ["default ZeRO-3 at least 0.6x of default ZeRO-2", x(tps["default ZeRO-3"] / z2), "no"],
        ],
    )
    other = Page()
    zero3_prefetch(other)
    for key in ("prefetch / recipe, 1 GPU", "prefetch / recipe, 2 GPUs"):
        p(key, other.figures[key])


def bench_rows(table: pd.DataFrame, cols: list[str], formats: tuple) -> list[list[str]]:
    """A bench.csv's rows as a page's table rows: each row's label, then each of `cols` in its format ("" where the
    row has none)."""
    return [[r["row"], *("" if pd.isna(r[c]) else f(r[c]) for c, f in zip(cols, formats))] for _, r in table.iterrows()]


PEERS_BEST = ROOT / "lab" / "findings" / "h200" / "bench-peers-best"


def peers_best_ratios(tps: pd.Series) -> list[tuple[str, str, str, float, float | None]]:
    """Issue 56's ratios from bench-peers-best's steady tokens/s ({row: tokens/s}): (what, numerator row,
    denominator row, ratio, goal or None), the strongest HF Trainer and TRL rows the fastest of their kind."""
    hf = tps[[r for r in tps.index if "HF Trainer" in r]].idxmax()
    trl = tps[[r for r in tps.index if "TRL SFTTrainer" in r]].idxmax()
    z2, fsdp2 = "default ZeRO-2", "HF Trainer + FSDP2 + Liger (best)"
    pairs = [
        ("default ZeRO-2 / the plain PyTorch ceiling", z2, "plain PyTorch (ceiling)", 0.9),
        ("default ZeRO-2 / the strongest HF Trainer row", z2, hf, 4),
        ("default ZeRO-2 / the strongest TRL row", z2, trl, 6),
        ("default ZeRO-3 / default ZeRO-2", "default ZeRO-3", z2, 0.6),
        ("the offload row / default ZeRO-2", "A/B: ZeRO-2 + CPU offload, 4 x 32k tokens (accumulation 4)", z2, 0.7),
        ("HF Trainer + FSDP2 / default ZeRO-3", fsdp2, "default ZeRO-3", None),
        ("HF Trainer + FSDP2 / HF Trainer + ZeRO-2 (best)", fsdp2, "HF Trainer + ZeRO-2 + Liger (best)", None),
    ]
    return [(what, a, b, tps[a] / tps[b], goal) for what, a, b, goal in pairs]


def bench_peers_best(p: Page) -> None:
    from repeats import band

    from lab.bench import HF_COMPILE, run_dir_name
    from workshop_lessons.comparisons import compare

    d = PEERS_BEST
    table = pd.read_csv(d / "bench.csv")
    tps = table.set_index("row")[title("steady_train_tokens_per_second")]
    p.table("configurations", ["row", "configuration"], table[["row", "configuration"]].values.tolist())
    cols = [title(c) for c in ("steady_train_tokens_per_second", "mfu", "gpu_util_pct", "gpu_peak_mib", "train_loss")]
    p.table("bench", ["row", *cols], bench_rows(table, cols, (n, str, n, n, str)))
    p.table(
        "ratios",
        ["ratio", "rows (numerator / denominator)", "measured", "goal", "met"],
        [
            [
                what,
                f"{a} / {b}",
                x(v),
                "" if goal is None else f">= {goal:g}x",
                "" if goal is None else ("met" if round(v, 2) >= goal else "not met"),
            ]
            for what, a, b, v, goal in peers_best_ratios(tps)
        ],
    )
    repeats = pd.read_csv(ROOT / "lab" / "findings" / "h200" / "protocol" / "repeats" / "repeats.csv")
    z2_band = band(repeats[repeats["configuration"] == "stage2:40"]["steady_train_tokens_per_second"].tolist())
    p("ZeRO-2 band, protocol", f"±{z2_band:.1%}")
    for key, a, b in (
        (
            "attention mask / no mask",
            "A/B: HF Trainer + ZeRO-2 + Liger, attention mask",
            "HF Trainer + ZeRO-2 + Liger (best)",
        ),
        (
            "TRL packing + padding-free / TRL padded",
            "A/B: TRL SFTTrainer + ZeRO-2 + Liger, packing + padding-free",
            "TRL SFTTrainer + ZeRO-2 + Liger (best)",
        ),
        (
            "padding-free (flattened) / no mask",
            "HF Trainer + ZeRO-2 + Liger, padding-free (flattened)",
            "HF Trainer + ZeRO-2 + Liger (best)",
        ),
    ):
        p(key, compare("steady_train_tokens_per_second", tps[a], tps[b], noise=z2_band).ratio_text)
    steps = {json.loads(f.read_text())["max_steps"] for f in (d / "runs").glob("*/results.json")}
    p("optimizer steps per row", ", ".join(map(str, sorted(steps))))
    log = (d / "log_headers_and_errors.txt").read_text()
    p("torch_compile row's CompilationErrors", str(log.count("triton.compiler.errors.CompilationError")))
    p("their error", re.findall(r"AttributeError\(\"(.*?)\"\)", log)[0])
    compiled = d / "runs" / run_dir_name(HF_COMPILE) / "train_log.csv"
    p("torch_compile row's logged steps", str(compiled.read_text().count("\n") - 1 if compiled.stat().st_size else 0))
    p("torch_compile row in bench.csv", "yes" if HF_COMPILE in tps.index else "no")


BENCH_FSDP2 = ROOT / "lab" / "findings" / "h200" / "bench-fsdp2"
FSDP2_PAIRS = [("default FSDP2", "default ZeRO-3"), ("default FSDP2", "default ZeRO-2")]


def bench_fsdp2(p: Page) -> None:
    from repeats import band

    from workshop_lessons.comparisons import compare

    table = pd.read_csv(BENCH_FSDP2 / "bench.csv")
    cols = [title(c) for c in ("steady_train_tokens_per_second", "mfu", "gpu_peak_allocated_mib", "gpu_peak_mib")]
    p.table("bench", ["row", *cols], bench_rows(table, cols, (n, str, n, n)))
    repeats = pd.read_csv(ROOT / "lab" / "findings" / "h200" / "protocol" / "repeats" / "repeats.csv")
    noise = max(band(g["steady_train_tokens_per_second"].tolist()) for _, g in repeats.groupby("configuration"))
    p("band, the protocol's ZeRO-2 and ZeRO-3 repeats (the wider)", f"±{noise:.1%}")
    t = table.set_index("row")
    for a, b in FSDP2_PAIRS:
        speed = compare("steady_train_tokens_per_second", t.loc[a, cols[0]], t.loc[b, cols[0]], noise=noise)
        p(f"{a} / {b}, steady tokens/s", speed.ratio_text)
        p(f"{a} / {b}, GPU peak", x(t.loc[a, cols[3]] / t.loc[b, cols[3]]))
    steps = {json.loads(f.read_text())["max_steps"] for f in (BENCH_FSDP2 / "runs").glob("*/results.json")}
    p("optimizer steps per row", ", ".join(map(str, sorted(steps))))


def zero3_prefetch(p: Page) -> None:
    logs = ROOT / "lab" / "findings" / "h200" / "zero3-prefetch" / "logs"
    tps = {q.stem: steady_line(q)[0] for q in logs.glob("*.log")}
    recipe, prefetch = ([tps[f"x2-{arm}-{i}"] for i in (1, 2)] for arm in ("recipe", "prefetch"))
    p("prefetch / recipe, 2 GPUs", x(statistics.mean(prefetch) / statistics.mean(recipe)))
    p("spread of an arm's two runs", f"±{max(abs(a - b) / ((a + b) / 2) for a, b in (recipe, prefetch)):.1%}")
    p("prefetch / recipe, 1 GPU", x(tps["x1-prefetch-alone"] / tps["x1-recipe-alone"]))
    for arm, two in (("recipe", recipe), ("prefetch", prefetch)):
        p(f"scaling efficiency, {arm}", f"{statistics.mean(two) / (2 * tps[f'x1-{arm}-alone']):.0%}")
    peaks = {q.stem: steady_line(q)[1] for q in logs.glob("x2-*.log")}
    grew = statistics.mean(v for k, v in peaks.items() if "prefetch" in k) - statistics.mean(
        v for k, v in peaks.items() if "recipe" in k
    )
    p("GPU peak grew MiB", n(grew))


def collation_gc_loss(p: Page) -> None:
    from lab.bench import CHUNKED

    d = FINDINGS / "bench-collation-gc-loss"
    t = {k: pd.read_csv(d / k / "bench.csv").set_index("row") for k in ("levers", "repeat2", "repeat3", "default")}
    workers, z2 = "A/B: ZeRO-2, 2 data loader workers", "default ZeRO-2"
    rows, gains = [], []
    for k in ("levers", "repeat2", "repeat3"):
        tps = t[k][title("steady_train_tokens_per_second")]
        ceiling = tps["plain PyTorch (ceiling)"]
        gains.append(tps[workers] / tps[z2])
        rows.append([k, x(tps[z2] / ceiling), x(gains[-1]), x(tps[workers] / ceiling)])
    p.table(
        "workers",
        ["process", "default ZeRO-2 / ceiling", "with 2 workers / default ZeRO-2", "with 2 workers / ceiling"],
        rows,
    )
    p("2 workers / ZeRO-2, range", f"{min(gains):.2f}-{max(gains):.2f}x")
    runs = {
        row: [t[k].loc[row, title("steady_train_tokens_per_second")] for k in ("levers", "repeat2", "repeat3")]
        for row in (workers, z2)
    }
    spread = {row: (max(v) - min(v)) / statistics.mean(v) for row, v in runs.items()}
    p("2 workers' spread", f"{spread[workers]:.1%}")
    p("ZeRO-2's spread", f"{spread[z2]:.1%}")
    lv, mib = t["levers"][title("steady_train_tokens_per_second")], t["levers"][title("gpu_peak_allocated_mib")]
    p("collector off / ZeRO-2", x(lv["A/B: ZeRO-2, Python's garbage collector off (disable_python_gc)"] / lv[z2]))
    own, stock = "A/B: ZeRO-2, 16k tokens", "A/B: ZeRO-2, 16k tokens, all logits"
    p("chunked / stock loss", x(lv[CHUNKED] / lv[stock]))
    p("chunked / workshop loss", x(lv[CHUNKED] / lv[own]))
    p("peak MiB, chunked", n(mib[CHUNKED]))
    p("peak MiB, stock", n(mib[stock]))
    p("peak MiB, workshop", n(mib[own]))
    p("chunked keeps MiB more", n(mib[CHUNKED] - mib[own]))
    nd, steps = t["default"][title("steady_train_tokens_per_second")], t["default"][title("steady_step_time_s")]
    z = nd[z2]
    offload = nd[[r for r in nd.index if "offload" in r]].max() / z
    targets(
        p,
        z / nd["plain PyTorch (ceiling)"],
        nd["default ZeRO-3"] / z,
        offload,
        header="target (issue 42) | measured",
        offload="CPU-offload",
    )
    p("ZeRO-2 / collating in the loop", x(z / nd["A/B: ZeRO-2, collation in the training loop"]))
    p(
        "offload / collating in the loop",
        x(nd["default ZeRO-2 + CPU offload"] / nd["A/B: ZeRO-2 + CPU offload, collation in the training loop"]),
    )
    p("ZeRO-3 / collating in the loop", x(nd["default ZeRO-3"] / nd["A/B: ZeRO-3, collation in the training loop"]))
    ratio = [steps[r] / steps[z2] for r in ("default ZeRO-2 + CPU offload", "default ZeRO-3")]
    p("offload's and ZeRO-3's step / ZeRO-2's", f"{min(ratio):.1f} to {max(ratio):.1f}")
    p("ZeRO-2 step s", f"{steps[z2]:.3f}")
    p("ceiling step s", f"{steps['plain PyTorch (ceiling)']:.3f}")
    cpu = {k: json.loads((d / "cpu" / k / "results.json").read_text()) for k in ("w0", "w2")}
    p("CPU tokens/s, 2 workers", n(cpu["w2"]["steady_train_tokens_per_second"]))
    p("CPU tokens/s, collating in the loop", n(cpu["w0"]["steady_train_tokens_per_second"]))
    x2 = {w: json.loads((d / "x2-h200" / f"w{w}" / "results.json").read_text()) for w in (2, 0)}
    a, b = (x2[w]["steady_train_tokens_per_second"] for w in (2, 0))
    p("2 x H200 tokens/s, 2 workers a rank", n(a))
    p("2 x H200 tokens/s, collating in the loop", n(b))
    p("2 x H200, 2 workers / collating in the loop", x(a / b))
    p("2 x H200 train loss", str(x2[2]["train_loss"]))
    w = pd.read_csv(FINDINGS / "bench" / "bench.csv").set_index("row")["window tokens/s"]
    p("2 data loader workers / ZeRO-2, bench", x(w["A/B: ZeRO-2, 2 data loader workers"] / w["default ZeRO-2"]))
    bench_profiles(p, calls=True)


def bucket_hooks(p: Page) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from lab.bench import BUCKETED, hook_buckets, run_dir_name
    from workshop_lib.model import architecture_config

    d = FINDINGS / "bench-bucket-hooks"
    with torch.device("meta"):
        params = [(0, q) for q in AutoModelForCausalLM.from_config(architecture_config("Qwen/Qwen3-0.6B")).parameters()]
    p("Qwen3-0.6B's parameters (tensors)", str(len(params)))
    p("buckets of 50,000,000 elements", str(len(hook_buckets(params[::-1], 50_000_000))))
    z2, ceiling = "default ZeRO-2", "plain PyTorch (ceiling)"
    t = {k: pd.read_csv(d / k / "bench.csv").set_index("row") for k in ("process1", "process2")}
    rows, shorter, peaks = [], [], {}
    for k, table in t.items():
        tps, step = table[title("steady_train_tokens_per_second")], table[title("steady_step_time_s")]
        shorter.append(1000 * (step[z2] - step[BUCKETED]))
        rows.append(
            [
                k,
                n(tps[ceiling]),
                n(tps[z2]),
                n(tps[BUCKETED]),
                x(tps[BUCKETED] / tps[z2], 3),
                x(tps[z2] / tps[ceiling]),
                x(tps[BUCKETED] / tps[ceiling]),
            ]
        )
        util, mib = table[title("gpu_util_pct")], table[title("gpu_peak_allocated_mib")]
        p(f"GPU util, default, {k}", f"{util[z2]:.1f}%")
        p(f"GPU util, per bucket, {k}", f"{util[BUCKETED]:.1f}%")
        peaks[k] = (n(mib[BUCKETED]), n(mib[z2]))
    p.table(
        "processes",
        [
            "process",
            "ceiling tokens/s",
            "default ZeRO-2 tokens/s",
            "one hook per bucket tokens/s",
            "per bucket / default",
            "default / ceiling",
            "per bucket / ceiling",
        ],
        rows,
    )
    assert len(set(peaks.values())) == 1, peaks  # the text states one pair for both processes
    p("peak alloc MiB, per bucket", peaks["process1"][0])
    p("peak alloc MiB, default", peaks["process1"][1])
    other = Page()
    collation_gc_loss(other)
    for key in ("2 workers' spread", "ZeRO-2's spread"):
        p(key, other.figures[key])
    p("step shorter ms, process1", f"{shorter[0]:.1f}")
    p("step shorter ms, rounded", f"{statistics.mean(shorter):.0f}")
    bench_profiles(p)
    p("step shorter ms, process2", f"{shorter[1]:.1f}")
    default = [table.loc[z2, title("steady_train_tokens_per_second")] for table in t.values()]
    p("default rows' spread", f"{(max(default) - min(default)) / statistics.mean(default):.1%}")
    step = t["process1"][title("steady_step_time_s")]
    p("ZeRO-2 step s, process1", f"{step[z2]:.3f}")
    p("ceiling step s, process1", f"{step[ceiling]:.3f}")

    def log(k, row):
        return pd.read_csv(d / k / "runs" / run_dir_name(row) / "train_log.csv").dropna(subset=["loss"]).reset_index()

    pairs = {
        "per bucket vs default": (log("process1", BUCKETED), log("process1", z2)),
        "default vs default": (log("process1", z2), log("process2", z2)),
    }
    for name, (a, b) in pairs.items():
        p(f"largest loss gap, {name}", f"{(a['loss'] - b['loss']).abs().max():.5f}")
    a, b = pairs["default vs default"]
    p("steps of equal loss", str(a["step"][a["loss"] != b["loss"]].min() - 1))


def packed(p: Page) -> None:
    from lab.bench import CEILING, CEILING_PACKED, PACKED, PACKED_NO_GC

    d = FINDINGS / "bench-packed"
    z2 = "default ZeRO-2"
    folders = [*(f"before-fix/process{i}" for i in (1, 2, 3, 4)), "before-fix/long", "after-fix"]
    rows, lift, dvc, packed_ceiling, times, off, others = [], [], [], [], [], [], []
    for k in folders:
        tps = pd.read_csv(d / k / "bench.csv").set_index("row")[title("steady_train_tokens_per_second")]
        packed_ceiling.append(tps[CEILING_PACKED])
        lift.append(tps[CEILING_PACKED] / tps[CEILING])
        dvc.append(tps[z2] / tps[CEILING])
        rows.append(
            [
                k,
                n(tps[CEILING]),
                n(tps[CEILING_PACKED]),
                x(lift[-1]),
                n(tps[z2]),
                n(tps[PACKED]),
                x(tps[PACKED] / tps[z2]),
                x(dvc[-1]),
                x(tps[PACKED] / tps[CEILING]),
                x(tps[PACKED] / tps[CEILING_PACKED]),
            ]
        )
        for row in (PACKED, PACKED_NO_GC):
            if row in tps.index:
                log = pd.read_csv(d / k / "runs" / _run_dir(row) / "train_log.csv").dropna(subset=["step_time_s"])
                slow = log[(log["step"] > 1) & (log["step_time_s"] > 0.5)]["step_time_s"].tolist()
                if k.startswith("before") and row == PACKED:
                    others.extend(log[(log["step"] > 1) & (log["step_time_s"] <= 0.5)]["step_time_s"])
                if k.startswith("before"):
                    (times if row == PACKED else off).extend(slow)
                if k == "before-fix/process1" and row == PACKED:
                    stalled = int(log.set_index("step").loc[18, "tokens"])
                    budget = json.loads((d / k / "runs" / _run_dir(row) / "run_config.json").read_text())
                    p("stalled row's tokens", n(stalled))
                    p("stalled row's padding", n(budget["max_tokens_per_micro_batch"] - stalled))
                if k == "after-fix" and row == PACKED:
                    p("step 18 after the fix s", f"{log.set_index('step').loc[18, 'step_time_s']:.3f}")
    p.table(
        "processes",
        [
            "folder",
            "ceiling",
            "packed ceiling",
            "packed / ceiling",
            "default ZeRO-2",
            "packed ZeRO-2",
            "packed / default ZeRO-2",
            "default ZeRO-2 / ceiling",
            "packed ZeRO-2 / ceiling",
            "packed ZeRO-2 / packed ceiling",
        ],
        rows,
    )
    p("packed ceiling / ceiling", " or ".join(sorted({x(v) for v in lift})))
    after, before = (
        rows[-1],
        rows[:-1],
    )  # the table's rows: [folder, ..., packed/default (6), ..., packed/ceiling (8), packed/packed ceiling (9)]
    p("after the fix: packed / default", after[6])
    p("after the fix: packed / ceiling", after[8])
    p("after the fix: packed / packed ceiling", after[9])
    p(
        "before the fix, 40 steps: packed / default",
        " or ".join(sorted({r[6] for r in before if not r[0].endswith("long")})),
    )
    p("before the fix, 100 steps: packed / default", next(r[6] for r in before if r[0].endswith("long")))
    p("other steps s", f"{statistics.median(others):.2f}")
    p("default / ceiling", f"{min(dvc):.2f}x-{max(dvc):.2f}x")
    p("stalled step s", f"{min(times):.2f}-{max(times):.2f}")
    p("stalled step s, collector off", " and ".join(sorted({f"{t:.2f}" for t in off})))
    p("packed ceiling after the fix", n(packed_ceiling[-1]))
    p("packed ceiling before the fix", f"{n(min(packed_ceiling[:-1]))} to {n(max(packed_ceiling[:-1]))}")

    def flex_ms(step: int) -> dict:
        section = (d / "profile" / "profile.txt").read_text().split(f"== step {step}")[1].split("by CPU time")[0]
        out = {}
        for line in section.splitlines():
            if line.startswith("triton_tem_fused") and "flex_attention" in line:
                out["backward" if "flex_attention_backward" in line else "forward"] = float(
                    line.split()[6].removesuffix("ms")
                )
        return out

    for step in (18, 17):
        f = flex_ms(step)
        p(f"FlexAttention backward ms, step {step}", f"{f['backward']:.1f}")
        p(f"FlexAttention forward ms, step {step}", f"{f['forward']:.1f}")


# --- docs/ and the course's references ------------------------------------------------------------------------


def run_order(p: Page) -> None:
    import workshop_lessons as lessons

    d = ROOT / "docs" / "h100" / "run-order"
    tps = tokens(d, "runs/*/results.json")
    tps = {k.removeprefix("runs/"): v for k, v in tps.items()}
    first, fourth, seventh = tps["1-stage2"], tps["4-stage2"], tps["7-stage2"]
    p("stage2 first tokens/s", n(first))
    p("first / fourth", x(first / fourth))
    p("stage2 fourth tokens/s", n(fourth))
    p("stage2 seventh tokens/s", n(seventh))
    p("seventh / fourth", x(seventh / fourth))
    p("baseline second tokens/s", n(tps["2-baseline"]))
    p("baseline sixth tokens/s", n(tps["6-baseline"]))
    p("sixth / second", x(tps["6-baseline"] / tps["2-baseline"]))
    p("band", f"±{lessons.band('steady_train_tokens_per_second', root=lessons.REFERENCE / 'h100' / 'course'):.1%}")
    p("forward ms, first", f"{steady_median(d / 'runs' / '1-stage2'):.1f}")
    p("first / fourth, cuDNN", first_over_fourth(FINDINGS / "new-shapes" / "cudnn-run-order"))
    p("forward ms, fourth", f"{steady_median(d / 'runs' / '4-stage2'):.1f}")


def links_page(p: Page, d: Path) -> dict:
    """The links table and ratios of a two-nodes-on-one-host folder (`multi_gpu.links`)."""
    from workshop_lessons.multi_gpu import links

    t = links(d).set_index("link")
    tps = {q.parent.name: json.loads(q.read_text())["steady_train_tokens_per_second"] for q in d.glob("*/results.json")}
    rows = []
    for link, name in (("nvlink", "NVLink"), ("sockets", "sockets over loopback")):
        rows.append(
            [
                name,
                t.at[link, "NCCL transport"],
                *(f"{t.at[link, f'{k} ms']:.{2 if link == 'nvlink' else 1}f}" for k in ("all_reduce", "all_gather")),
                f"{t.at[link, 'all_gather bus GB/s']:.1f}",
                f"{t.at[link, 'stage2 s/step']:.3f}",
                f"{t.at[link, 'stage3 s/step']:.3f}",
            ]
        )
    p.table(
        "links",
        [
            "link",
            "NCCL transport",
            "ZeRO-2's all-reduce of the gradients, ms",
            "its all-gather of the parameters, ms",
            "all-gather bus GB/s",
            "ZeRO-2 s/step",
            "ZeRO-3 s/step",
        ],
        rows,
    )
    for stage, name in (("stage2", "ZeRO-2"), ("stage3", "ZeRO-3")):
        p(f"{name} step, sockets / NVLink", x(t.at["sockets", f"{stage} s/step"] / t.at["nvlink", f"{stage} s/step"]))
    for run in ("stage2-nvlink", "stage2-sockets", "stage3-nvlink", "stage3-sockets"):
        p(f"{run} tokens/s", n(tps[run]))
    return tps


def links_h100(p: Page) -> None:
    from workshop_lessons import multi_gpu

    d = multi_gpu.LINKS
    links_page(p, d)
    t = multi_gpu.links(d).set_index("link")
    for s, name in (("stage2", "ZeRO-2"), ("stage3", "ZeRO-3")):
        p(f"{name} step grew ms", f"{1000 * (t.at['sockets', f'{s} s/step'] - t.at['nvlink', f'{s} s/step']):.0f}")
    p("ZeRO-2 collectives grew ms", f"{t.at['sockets', 'serial ms'] - t.at['nvlink', 'serial ms']:.0f}")
    cfg = json.loads((d / "stage2-nvlink" / "ds_config.json").read_text())
    params = json.loads((d / "stage2-nvlink" / "results.json").read_text())["num_params"]
    p("first bucket fills at", f"{multi_gpu.buckets(cfg, params).first_sent_at:.0%}")


def links_h200(p: Page) -> None:
    tps = links_page(p, REF / "h200" / "links-2026-11-27")
    one, two = tps["stage2-1gpu"], tps["stage2-2gpu"]
    p("1 GPU tokens/s", n(one))
    p("alone on 2 GPUs tokens/s", n(two))
    p("scaling efficiency, alone", f"{two / 2 / one:.0%}")
    p("scaling efficiency, same call", f"{tps['stage2-nvlink'] / 2 / one:.0%}")


def x2_h200_26(p: Page) -> None:
    from workshop_lessons import multi_gpu
    from workshop_lessons.multi_gpu import stragglers

    d = REF / "h200" / "x2-2026-11-26"
    tps = tokens(d)
    p.table(
        "scaling",
        ["experiment", "1 GPU tokens/s", "2 GPUs tokens/s", "scaling efficiency"],
        [
            [
                s,
                n(tps[f"runs/{s}-1gpu"]),
                n(tps[f"runs/{s}-nvlink"]),
                f"{tps[f'runs/{s}-nvlink'] / 2 / tps[f'runs/{s}-1gpu']:.0%}",
            ]
            for s in ("stage2", "stage3")
        ],
    )
    for s, name in (("stage2", "ZeRO-2"), ("stage3", "ZeRO-3")):
        p(f"{s} over sockets tokens/s", n(tps[f"links/{s}-sockets"]))
        step = json.loads((d / "links" / f"{s}-sockets" / "results.json").read_text())["steady_step_time_s"]
        p(f"{s} over sockets s/step", f"{step:.2f}")
        p(f"{name} NVLink / sockets", x(tps[f"runs/{s}-nvlink"] / tps[f"links/{s}-sockets"], 1))
    comm = multi_gpu.zero2_collectives_ms(pd.read_csv(d / "comm-sockets.csv"))["serial"]
    p("all-reduce and all-gather over sockets s", f"{comm / 1000:.2f}")
    bal, rnd = ([tps[f"ab/stage2-{v}-{i}"] for i in (1, 2)] for v in ("balanced", "unbalanced"))
    for v, runs in (("balanced", bal), ("random order", rnd)):
        p(f"{v} tokens/s", " and ".join(map(n, runs)))
        p(f"{v} spread", f"{abs(runs[0] - runs[1]) / statistics.mean(runs):.1%}")
    p("balanced / random order", x(statistics.mean(bal) / statistics.mean(rnd)))
    for v, name in (("balanced", "balanced"), ("unbalanced", "random order")):
        waits = [round(stragglers(d / "ab" / f"stage2-{v}-{i}").mean_waited_ms, 1) for i in (1, 2)]
        p(f"faster rank waited ms, {name}", f"{waits[0]} and {waits[1]}")
    rows = []
    for link, name in (("nvlink", "NVLink (P2P/CUMEM)"), ("sockets", "sockets over loopback (NET/Socket)")):
        c = pd.read_csv(d / f"comm-{link}.csv").set_index("op")
        rs, ag = c.loc["reduce_scatter"].iloc[-1], c.loc["all_gather"].iloc[-1]
        f = lambda v: f"{v:,.{2 if v < 10 else 1}f} ms"  # noqa: E731
        rows.append([name, f(rs["ms"]), f(ag["ms"]), f"{rs['busbw_gbps']:.3g} GB/s"])
    p.table(
        "links",
        ["link", "reduce-scatter of 953.7 MiB (gradients)", "all-gather of 1,136.9 MiB (parameters)", "bus bandwidth"],
        rows,
    )


def rounds(d: Path, name: str, metric: str = "steady_train_tokens_per_second") -> list[float]:
    """`metric` of run `name` in each round made by `scripts/two_gpu_reference.py` under d, in order (runs/NAME, then
    its repeats as `lessons.band` reads them)."""
    import workshop_lessons as lessons

    first = json.loads((d / "runs" / name / "results.json").read_text())
    return [r[metric] for r in (first, *lessons._repeats(d).get(name, []))]


def x2_h200_29(p: Page) -> None:
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu
    from workshop_lessons.comparisons import compare

    d, tps = multi_gpu.REFERENCE, "steady_train_tokens_per_second"
    roots = {"stage2": d, "stage3": d, "fsdp2": d / "fsdp2"}
    times = json.loads((lessons.REFERENCE / "notebook_times.json").read_text())
    p("notebook 04 s", f"{times['2 x NVIDIA H200']['04_multi_gpu']['seconds']:.0f}")
    p("band", f"±{lessons.band(tps, root=d):.1%}")
    rows, med, peak, bands = [], {}, {}, {}
    for e, root in roots.items():
        bands[e] = lessons.band(tps, root, (f"{e}-1", f"{e}-2"))
        m = lessons.median_runs(root).set_index(["experiment", "world_size"])  # of each run's rounds, the median one
        for k in (1, 2):
            v = rounds(root, f"{e}-{k}")
            med[e, k], peak[e, k] = m.at[(e, k), tps], m.at[(e, k), "gpu_peak_allocated_mib"]
            spread = lessons.band(tps, root, (f"{e}-{k}",))  # that run's own spread over its rounds
            spread = "one round" if spread is None else f"{spread:.1%}"
            rows.append([f"{e}-{k}", *(n(t) for t in v), *["n/a"] * (3 - len(v)), n(med[e, k]), spread])
    p.table(
        "rounds",
        ["run", "round 1 (runs/)", "round 2 (repeat/)", "round 3 (the notebook's)", "median run", "spread"],
        rows,
    )
    p.table(
        "scaling",
        ["experiment", "1 GPU tokens/s", "2 GPUs tokens/s", "scaling efficiency", "band"],
        [[e, n(med[e, 1]), n(med[e, 2]), f"{med[e, 2] / 2 / med[e, 1]:.0%}", f"±{bands[e]:.1%}"] for e in roots],
    )
    rows = []
    for k in (1, 2):
        for other, name in (("stage2", "ZeRO-2"), ("stage3", "ZeRO-3")):
            c = compare(tps, med["fsdp2", k], med[other, k], noise=max(bands["fsdp2"], bands[other]))
            rows.append(
                [
                    k,
                    name,
                    n(med[other, k]),
                    n(med["fsdp2", k]),
                    x(c.ratio),
                    c.verdict,
                    c.band_text,
                    x(peak["fsdp2", k] / peak[other, k]),
                ]
            )
    header = [
        "GPUs",
        "against",
        "its tokens/s",
        "FSDP2 tokens/s",
        "FSDP2 / it",
        "verdict",
        "band",
        "peak allocated, FSDP2 / it",
    ]
    p.table("fsdp2", header, rows)


def x2_h100_28(p: Page) -> None:
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu

    d = REF / "h100" / "x2-2026-11-28"
    times = json.loads((lessons.REFERENCE / "notebook_times.json").read_text())
    seconds = times["2 x NVIDIA H100 80GB HBM3"]["04_multi_gpu"]["seconds"]
    build = int(re.search(r"compiled in (\d+) s", (d / "runs" / "stage3-1" / "launch.log").read_text())[1])
    p("notebook 04 s", f"{seconds:.0f}")
    p("fused_adam build s", str(build))
    p("notebook 04 without the build s", f"{round(seconds - build, -1):.0f}")
    p("band", f"±{lessons.band('steady_train_tokens_per_second', root=d):.1%}")
    p.table(
        "scaling",
        ["measurement", *SCALING],
        [*scaling_rows(d / "runs", "runs"), *scaling_rows(d / "repeat", "repeat")],
    )
    from workshop_lib.results import load_results, scaling_table

    tables = {
        part: scaling_table(load_results(d / part)).set_index(["experiment", "GPUs"]) for part in ("runs", "repeat")
    }
    for e, name in (("stage2", "ZeRO-2"), ("stage3", "ZeRO-3")):
        one, two = (
            statistics.mean(st.at[(e, k), title("steady_train_tokens_per_second")] for st in tables.values())
            for k in (1, 2)
        )
        p(f"scaling efficiency, mean of both, {name}", f"{two / 2 / one:.0%}")

    def median(part, run, col="forward_ms"):
        return steady_median(d / part / run, col)

    for part in ("runs", "repeat"):
        for k in (1, 2):
            p(f"ZeRO-3 forward ms, {part}, {k} GPU", f"{median(part, f'stage3-{k}'):.1f}")
    zero2 = [median(part, f"stage2-{k}") for part in ("runs", "repeat") for k in (1, 2)]
    p("ZeRO-2 forward ms, all four", f"{min(zero2):.1f} to {max(zero2):.1f}")
    for part in ("runs", "repeat"):
        for r, name in (("stage2-2", "ZeRO-2"), ("stage3-2", "ZeRO-3")):
            p(f"faster rank waited ms, {name}, {part}", f"{multi_gpu.stragglers(d / part / r).mean_waited_ms:.1f}")
    step3 = median("runs", "stage3-2", "step_time_s")
    p("ZeRO-3 wait / step, runs", f"{multi_gpu.stragglers(d / 'runs' / 'stage3-2').mean_waited_ms / 1000 / step3:.0%}")
    p("ZeRO-3 step s, runs", f"{step3:.3f}")
    bucket_ab_table(p)
    steps = [median(f"ab/{part}", "stage2-recipe-buckets", "step_time_s") * 1000 for part in ("runs", "repeat")]
    p("recipe's buckets step ms", f"{min(steps):.0f}-{max(steps):.0f}")
    t = multi_gpu.links(multi_gpu.LINKS).set_index("link")
    params = json.loads((d / "runs" / "stage2-2" / "results.json").read_text())["num_params"]
    b = multi_gpu.buckets(json.loads((d / "runs" / "stage2-2" / "ds_config.json").read_text()), params)
    share = min(b.reduce_bucket_size, params) / params  # of every gradient's all-reduce, a full bucket's
    p("bucket all-reduce over NVLink ms", f"{t.at['nvlink', 'all_reduce ms'] * share:.1f}")


def x2_h100_27b(p: Page) -> None:
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu
    from workshop_lib.results import load_results, scaling_table

    d = REF / "h100" / "x2-2026-11-27b"
    p.table("scaling", SCALING, scaling_rows(d / "runs"))
    p("ZeRO-3 scaling efficiency, HF's prefetch", scaling_rows(REF / "h100" / "x2-2026-11-27" / "runs")[1][-1])
    st = scaling_table(load_results(d / "repeat")).set_index(["experiment", "GPUs"])
    p("ZeRO-3 scaling efficiency, repeat", st.at[("stage3", 2), "scaling efficiency"])
    p("ZeRO-3 tokens/s, repeat, 1 GPU", n(st.at[("stage3", 1), title("steady_train_tokens_per_second")]))
    p("ZeRO-3 tokens/s, repeat, 2 GPUs", n(st.at[("stage3", 2), title("steady_train_tokens_per_second")]))
    p("band", f"±{lessons.band('steady_train_tokens_per_second', root=d):.1%}")
    p("faster rank waited ms, ZeRO-2", f"{multi_gpu.stragglers(d / 'runs' / 'stage2-2').mean_waited_ms:.1f}")
    for part in ("runs", "repeat"):
        p(f"faster rank waited ms, ZeRO-3, {part}", f"{multi_gpu.stragglers(d / part / 'stage3-2').mean_waited_ms:.1f}")
    for k in (1, 2):
        p(f"ZeRO-3 forward ms, {k} GPU", f"{steady_median(d / 'runs' / f'stage3-{k}'):.1f}")
        p(f"ZeRO-3 step s, {k} GPU", f"{steady_median(d / 'runs' / f'stage3-{k}', 'step_time_s'):.3f}")


def x2_h100_27(p: Page) -> None:
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu

    d = REF / "h100" / "x2-2026-11-27"
    p.table("scaling", SCALING, scaling_rows(d / "runs"))
    p("band", f"±{lessons.band('steady_train_tokens_per_second', root=d):.1%}")
    for r, name in (("stage2-2", "ZeRO-2"), ("stage3-2", "ZeRO-3")):
        p(f"faster rank waited ms, {name}", f"{multi_gpu.stragglers(d / 'runs' / r).mean_waited_ms:.1f}")
    for k in (1, 2):
        p(f"ZeRO-3 forward ms, {k} GPU", f"{steady_median(d / 'runs' / f'stage3-{k}'):.1f}")
        p(f"ZeRO-3 step s, {k} GPU", f"{steady_median(d / 'runs' / f'stage3-{k}', 'step_time_s'):.3f}")
    f1, g1 = steady_median(d / "runs" / "stage3-1"), steady_median(d / "runs" / "stage2-1")
    p("ZeRO-2 forward ms, 1 GPU", f"{g1:.1f}")
    p("ZeRO-3 / ZeRO-2 forward, 1 GPU", x(f1 / g1, 1))


def x2_h200_27(p: Page) -> None:
    from workshop_lessons import multi_gpu

    d = REF / "h200" / "x2-2026-11-27"
    nb = d / "notebook" / "04_multi_gpu"
    p.table("scaling", SCALING, scaling_rows(nb))
    for r, name in (("stage2-2", "ZeRO-2"), ("stage3-2", "ZeRO-3")):
        p(f"faster rank waited ms, {name}", f"{multi_gpu.stragglers(nb / r).mean_waited_ms:.1f}")
    bucket_ab_table(p, d / "ab")


def guide(p: Page) -> None:
    p("first / fourth, cuDNN", first_over_fourth(FINDINGS / "new-shapes" / "cudnn-run-order"))
    from workshop_lib.results import exercise_table, load_results, scaling_table

    t = exercise_table(load_results(REF / "h100" / "runs"))
    order = ["baseline", "stage2", "stage2_offload", "stage3_offload"]
    t = t[t["experiment"].isin(order)]
    t = t.assign(o=t["recipe"].map({"default": 0, "classic": 1}), e=t["experiment"].map(order.index)).sort_values(
        ["o", "e"]
    )
    p.table(
        "h100-runs",
        [
            "experiment",
            "model, recipe",
            title("steady_train_tokens_per_second"),
            title("mfu"),
            title("gpu_peak_mib"),
            title("gpu_peak_allocated_mib"),
            "DeepSpeed est. model states MiB",
            title("host_peak_rss_mib"),
        ],
        [
            [
                r["experiment"],
                f"{r['model'].split('/')[-1]}, {r['recipe']}",
                n(r[title("steady_train_tokens_per_second")]),
                r[title("mfu")],
                n(r[title("gpu_peak_mib")]),
                n(r[title("gpu_peak_allocated_mib")]),
                n(r[title("estimated_model_states_gpu_mib")]),
                n(r[title("host_peak_rss_mib")]),
            ]
            for _, r in t.iterrows()
        ],
    )
    st = scaling_table(load_results(REF / "h200" / "default-x4" / "runs"))
    p.table(
        "h200-runs",
        [
            "experiment",
            "GPUs",
            "steady tokens/s per GPU",
            "scaling efficiency",
            "peak GPU MiB per GPU",
            "DeepSpeed est. model states MiB",
        ],
        [
            [
                r["experiment"],
                r["GPUs"],
                n(r["steady tokens/s per GPU"]),
                r["scaling efficiency"],
                n(r["peak GPU MiB per GPU"]),
                n(r[title("estimated_model_states_gpu_mib")]),
            ]
            for _, r in st.iterrows()
        ],
    )
    from workshop_lib.variables import VARIABLES

    p.tables["variables"] = [  # every WORKSHOP_* variable, from workshop_lib.variables
        "| variable | default | read by | meaning |",
        "| --- | --- | --- | --- |",
        *(f"| `{v.name}` | {v.default} | {v.read_by} | {v.meaning} |" for v in VARIABLES.values()),
    ]
    import workshop_lessons as lessons
    from workshop_lib.fit import GPUS, HEADROOM

    p("share of the GPU's free memory", f"{1 - HEADROOM:.0%}")
    p("fit.HEADROOM", f"{HEADROOM:.0%}")
    for gpu, name in (
        ("H200 141GB", "H200"),
        ("H100 80GB", "80 GB"),
        ("A100 40GB", "40-48 GB"),
        ("RTX 4090 24GB", "24 GB"),
    ):
        p(f"micro-batch tokens, {name}", n(lessons.course_budget(GPUS[gpu]).tokens))
    rows = [
        line.split()
        for line in (ROOT / "docs/h100/gpu40/peaks.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    p("H100 limited to MiB", n(float(rows[0][5]) * float(rows[0][4])))
    p("baseline micro-batch tokens", n(max(int(r[2]) for r in rows if r[1] == "baseline")))


def notebook_03b(p: Page) -> None:
    from workshop_lib import checkpoint
    from workshop_lib.config import RunConfig
    from workshop_lib.units import MiB

    p.inline["checksum-mib"] = f"{checkpoint.CHECKSUM_MAX_BYTES / MiB:g}"
    p.inline["save-total-limit"] = str(RunConfig("stage3_offload").save_total_limit)
    p.inline["optimizer-bytes"] = str(checkpoint.OPTIMIZER_BYTES)
    p.inline["checkpoint-bytes"] = str(checkpoint.bytes_per_param("bf16"))


def notebook_03c(p: Page) -> None:
    from workshop_lessons import large_models as lm
    from workshop_lib import fit, memory
    from workshop_lib.units import MiB

    tokens = {
        json.loads(q.read_text())["max_tokens_per_micro_batch"] for q in REF.glob("h*/large-models*/**/run_config.json")
    }
    assert tokens == {lm.LARGE["max_tokens_per_micro_batch"]}, tokens  # the reference runs' are the notebook's
    p.inline["reference-tokens"] = f"{tokens.pop():,}"
    p.inline["verdict-share"] = f"{1 - fit.HEADROOM:.0%}"
    p.inline["headroom"] = f"{fit.HEADROOM:.0%}"
    p.inline["trainer-bytes"] = f"{memory.zero_bytes_per_param(0, 1):g}"
    # DeepSpeed's host estimate for ZeRO-3 + CPU offload, split as bytes/param x its buffer factor
    n, factor = 10**9, 1.5
    host = memory.estimate_model_states(n, 10**7, 3, offload_optimizer=True, offload_param=True)
    per_param = round(host["estimated_model_states_cpu_mib"] * MiB / n / factor)
    assert host["estimated_model_states_cpu_mib"] == round(n * per_param * factor / MiB, 1), host
    p.inline["host-bytes"], p.inline["buffer-factor"] = str(per_param), f"{factor:g}"
    p.inline["reference-gpu"] = lm.REFERENCE_GPU.split()[0]
    p.inline["reference-host-gib"] = f"{lm.REFERENCE_HOST_MIB / 1024:g}"
    # the ladder's order, from the reference runs: offload the slowest
    x2 = lm.reference_runs(lm.REFERENCES[lm.X2]).set_index("experiment")
    p.inline["zero3-vs-offload-8b"] = x(
        x2.at["stage3", title("steady_train_tokens_per_second")]
        / x2.at["stage3_offload", title("steady_train_tokens_per_second")],
        1,
    )
    p.inline["checkpointing-vs-offload-4b"] = x(lm.checkpointing_against_offload().tokens_per_second.ratio, 1)


def h200_scaling(p: Page) -> None:
    from workshop_lib.results import load_results, scaling_table

    h200_figures(p)

    for machine in ("x4", "x2"):
        st = scaling_table(load_results(ROOT / "docs" / "h200" / machine / "runs"))
        p.table(
            f"scaling-{machine}",
            [
                "experiment",
                "GPUs",
                "global batch",
                title("train_samples_per_second"),
                "samples/s per GPU",
                "scaling efficiency",
                "peak GPU MiB per GPU",
                "DS est. model states GPU MiB",
                title("train_loss"),
            ],
            [
                [
                    r["experiment"],
                    r["GPUs"],
                    f"{r[title('global_batch_size')]:g}",
                    f"{r[title('train_samples_per_second')]:.2f}",
                    f"{r['samples/s per GPU']:.2f}",
                    r["scaling efficiency"],
                    n(r["peak GPU MiB per GPU"]),
                    n(r[title("estimated_model_states_gpu_mib")]),
                    f"{r[title('train_loss')]:.4f}",
                ]
                for _, r in st.iterrows()
            ],
        )


def h200_figures(p: Page) -> None:
    runs = {
        k: json.loads((ROOT / "docs" / "h200" / "x4" / "runs" / f"stage2-{k}gpu" / "results.json").read_text())
        for k in (1, 2, 4)
    }
    p(
        "ZeRO-2 s/step, 1, 2 and 4 GPUs",
        ", ".join(f"{r['train_runtime_seconds'] / r['global_steps']:.2f}" for r in runs.values()),
    )
    ranks = {k: r["per_rank_memory"] for k, r in runs.items()}
    p(
        "ZeRO-2 peak GiB, 1, 2 and 4 GPUs",
        " -> ".join(f"{max(m['gpu_peak_mib'] for m in v) / 1024:.1f}" for v in ranks.values()),
    )
    p(
        "ZeRO-2 estimate GiB, 1, 2 and 4 GPUs",
        " -> ".join(f"{r['estimated_model_states_gpu_mib'] / 1024:.1f}" for r in runs.values()),
    )
    four = ranks[4]
    p(
        "ZeRO-2 at 4 GPUs, ranks' NVML peak MiB",
        f"{n(min(m['gpu_peak_mib'] for m in four))} to {n(max(m['gpu_peak_mib'] for m in four))}",
    )
    alloc = [m["gpu_peak_allocated_mib"] for m in four]
    p("ZeRO-2 at 4 GPUs, ranks' allocated peak MiB", f"{n(min(alloc))} to {n(max(alloc))}")


PAGES = {
    "docs/h200/README.md": h200_scaling,
    "solutions/03b_the_fine_tuned_model.py": notebook_03b,
    "solutions/03c_models_that_do_not_fit.py": notebook_03c,
    "lab/findings/h100/bench/README.md": bench,
    "lab/findings/h100/bench-zero3-offload/README.md": bench_zero3_offload,
    "lab/findings/h100/bench-gap/README.md": bench_gap,
    "lab/findings/h100/first-run/README.md": first_run,
    "lab/findings/h100/deepcompile/README.md": deepcompile,
    "lab/findings/h100/new-shapes/README.md": new_shapes,
    "lab/findings/h100/bench-flash/README.md": bench_flash,
    "lab/findings/h100/bench-peers/README.md": bench_peers,
    "lab/findings/h200/bench-prefetch/README.md": bench_prefetch,
    "lab/findings/h200/zero3-prefetch/README.md": zero3_prefetch,
    "lab/findings/h200/bench-peers-best/README.md": bench_peers_best,
    "lab/findings/h200/bench-fsdp2/README.md": bench_fsdp2,
    "lab/findings/h100/bench-collation-gc-loss/README.md": collation_gc_loss,
    "lab/findings/h100/bench-bucket-hooks/README.md": bucket_hooks,
    "lab/findings/h100/bench-packed/README.md": packed,
    "docs/h100/run-order/README.md": run_order,
    "workshop_lessons/reference/h100/links-2026-11-28/README.md": links_h100,
    "workshop_lessons/reference/h200/links-2026-11-27/README.md": links_h200,
    "workshop_lessons/reference/h200/x2-2026-11-26/README.md": x2_h200_26,
    "workshop_lessons/reference/h200/x2-2026-11-29/README.md": x2_h200_29,
    "workshop_lessons/reference/h100/x2-2026-11-28/README.md": x2_h100_28,
    "workshop_lessons/reference/h100/x2-2026-11-27b/README.md": x2_h100_27b,
    "workshop_lessons/reference/h100/x2-2026-11-27/README.md": x2_h100_27,
    "workshop_lessons/reference/h200/x2-2026-11-27/README.md": x2_h200_27,
    "docs/guide.md": guide,
}


def page(rel: str) -> Page:
    p = Page()
    PAGES[rel](p)
    return p


def written(rel: str, root: Path = ROOT) -> str:
    """The page's text with each block between its markers as this script writes it."""
    text, p = (root / rel).read_text(), page(rel)
    for name, value in p.inline.items():
        found = re.compile(rf"(<!--fig:{re.escape(name)}-->).*?(<!--/fig:{re.escape(name)}-->)")
        if not found.search(text):
            raise SystemExit(f"{rel} names no <!--fig:{name}-->...<!--/fig:{name}--> figure.")
        text = found.sub(lambda m, v=value: m.group(1) + v + m.group(2), text)
    for name, block in p.blocks().items():
        begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        if text.count(begin) != 1 or text.count(end) != 1:
            raise SystemExit(f"{rel} needs one {begin} and one {end} line, the place of its {name} table.")
        head, rest = text.split(begin)
        text = f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"
    return text


def main(check: bool) -> int:
    return write_or_check({ROOT / rel: written(rel) for rel in PAGES}, ROOT, check, "python scripts/make_figures.py")


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
