"""Figures in the docs come from committed runs: the README's H100 excerpt, docs/h100/report.csv and the
H200 scaling tables must match the results.json files they were made from. The README's layout and the
package docstring name every file and module there is, and nothing that is not."""

import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from workshop_lib.results import exercise_table, load_results, scaling_table

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "docs" / "h100"
H200 = ROOT / "docs" / "h200"


def test_h100_report_is_regenerated_from_the_committed_runs():
    table = exercise_table(load_results(H100 / "runs"))
    committed = pd.read_csv(H100 / "report.csv")
    assert len(table) == len(committed) == 8
    assert list(table["steady tokens/s"]) == list(committed["steady tokens/s"])
    assert list(table["GPU peak MiB"]) == list(committed["GPU peak MiB"])


def test_token_budget_tables_count_questions_not_micro_batches():
    """The Trainer's train_samples_per_second counts per_device_train_batch_size per micro-batch (4 in these
    token-budget runs), not questions: the tables show steady questions/s (questions per step / median step),
    the micro-batch in tokens, and not the Trainer's figure."""
    df = load_results(H100 / "runs")
    r = df[(df["experiment"] == "baseline") & (df["recipe"] == "default")].iloc[0]
    assert r["config"]["batching"] == "token_budget" and r["micro_batch_size_per_gpu"] == 4
    steps = r["global_steps"] * r["micro_batch_size_per_gpu"] / r["train_runtime_seconds"]
    assert abs(r["train_samples_per_second"] - steps) < 0.01  # 4 per micro-batch, one micro-batch per step
    questions = r["data_stats"]["train"]["used"] / r["steps_per_epoch"]  # mean questions per optimizer step
    assert abs(r["steady_train_samples_per_second"] - questions / r["steady_step_time_s"]) < 0.01 * questions
    table = exercise_table(df)
    assert "samples/s" not in table and table["micro-batch"].iloc[0] == "≤32,768 tokens"
    committed = pd.read_csv(H100 / "report.csv")
    assert list(committed["steady questions/s"]) == list(table["steady questions/s"]) == list(
        df["steady_train_samples_per_second"])
    scaling = scaling_table(load_results(H200 / "default-x4" / "runs"))
    assert "samples/s" not in scaling and list(scaling["steady questions/s"]) == list(
        pd.read_csv(H200 / "default-x4" / "scaling.csv")["steady questions/s"])
    # stage3 against stage2 on one GPU: slower in questions/s as in tokens/s (samples/s had it the other way)
    one = scaling[scaling["GPUs"] == 1].set_index("experiment")
    assert one.at["stage3", "steady questions/s"] < one.at["stage2", "steady questions/s"]
    assert one.at["stage3", "steady tokens/s"] < one.at["stage2", "steady tokens/s"]


def test_readme_excerpt_matches_the_runs():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (baseline|stage2|stage2_offload|stage3_offload) \| ([\w.-]+), (\w+) \| ([\d,]+) \| [\d.]+% \| "
                      r"([\d,]+) \|", readme, re.M)
    assert len(rows) == 8
    for exp, model, recipe, tps, peak in rows:
        r = json.loads((H100 / "runs" / f"{model}-{recipe}-{exp}" / "results.json").read_text())
        assert abs(int(tps.replace(",", "")) - r["steady_train_tokens_per_second"]) < 1
        assert abs(int(peak.replace(",", "")) - r["gpu_peak_mib"]) < 1


def test_h200_scaling_tables_match_the_committed_runs():
    """Each row of docs/h200/README.md's tables against the scaling table `workshop report` makes from the runs."""
    text = (H200 / "README.md").read_text()
    for machine, n_rows in (("x4", 6), ("x2", 4)):
        section = text.split(f"## {machine[1]} x H200")[1].split("##")[0]
        rows = re.findall(r"^\| (stage[23]) \| (\d) \| \d+ \| ([\d.]+) \| ([\d.]+) \| (\d+)% \| ([\d,]+) \|", section, re.M)
        scaling = scaling_table(load_results(H200 / machine / "runs"))
        committed = pd.read_csv(H200 / machine / "scaling.csv")
        assert len(rows) == len(scaling) == len(committed) == n_rows
        assert list(scaling["samples/s per GPU"]) == list(committed["samples/s per GPU"])
        for exp, gpus, sps, per_gpu, eff, peak in rows:
            r = scaling[(scaling["experiment"] == exp) & (scaling["GPUs"] == int(gpus))].iloc[0]
            assert abs(float(sps) - r["samples/s"]) < 0.006 and abs(float(per_gpu) - r["samples/s per GPU"]) < 0.006
            assert f"{eff}%" == r["scaling efficiency"]
            assert abs(int(peak.replace(",", "")) - r["peak GPU MiB per GPU"]) < 1


def test_h200_default_recipe_scaling_is_regenerated_from_its_runs():
    """docs/h200/default-x4/scaling.csv: steady tokens/s per GPU and efficiency as `workshop report` makes them."""
    scaling = scaling_table(load_results(H200 / "default-x4" / "runs"))
    committed = pd.read_csv(H200 / "default-x4" / "scaling.csv")
    assert committed.groupby("experiment")["GPUs"].apply(list).to_dict() == {
        "stage2": [1, 2, 4], "stage3": [1, 2, 4], "stage3_offload": [1, 2]}  # stage3_offload x4: the call's time ran out
    for col in ("steady tokens/s per GPU", "scaling efficiency", "peak GPU MiB per GPU"):
        assert list(scaling[col]) == list(committed[col])


def test_readme_h200_excerpt_matches_the_runs():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| (stage[23]\w*) \| (\d) \| ([\d,]+) \| (\d+%) \| ([\d,]+) \| ([\d,]+) \|", readme, re.M)
    scaling = scaling_table(load_results(H200 / "default-x4" / "runs"))
    assert len(rows) == len(scaling) == 8
    for exp, gpus, per_gpu, eff, peak, est in rows:
        r = scaling[(scaling["experiment"] == exp) & (scaling["GPUs"] == int(gpus))].iloc[0]
        assert abs(int(per_gpu.replace(",", "")) - r["steady tokens/s per GPU"]) <= 0.5 and eff == r["scaling efficiency"]
        assert abs(int(peak.replace(",", "")) - r["peak GPU MiB per GPU"]) <= 0.5
        assert abs(int(est.replace(",", "")) - r["est. model states GPU MiB"]) <= 0.5


def test_readme_lists_every_experiment():
    """The README's experiments table against config.EXPERIMENTS: an experiment added in one is in both."""
    from workshop_lib.config import EXPERIMENTS

    readme = (ROOT / "README.md").read_text()
    table = readme.split("## The experiments")[1].split("```")[0]
    assert re.findall(r"^\| `(\w+)` \|", table, re.M) == list(EXPERIMENTS)


@pytest.mark.parametrize("name, rows_expected", [("bench", 17), ("bench-levers", 12), ("bench-gap", 7)])
def test_h100_bench_table_matches_its_runs(name, rows_expected):
    """docs/h100/bench*/bench.csv, row by row, against the results.json of the run behind it."""
    from workshop_lib.bench import run_dir_name

    bench = ROOT / "docs" / "h100" / name
    table = pd.read_csv(bench / "bench.csv")
    rows = table[table["row"] != "plain PyTorch (ceiling)"]
    assert len(rows) == rows_expected and (table["row"] == "plain PyTorch (ceiling)").sum() == 1
    for _, row in rows.iterrows():
        r = json.loads((bench / "runs" / run_dir_name(row["row"]) / "results.json").read_text())
        assert r["device"].startswith("NVIDIA H100") and r["max_steps"] == 24 and r["warmup_steps"] == 8
        assert (row["steady tokens/s"], row["MFU"], row["GPU util %"]) == \
               (r["steady_train_tokens_per_second"], r["mfu"], r["gpu_util_pct"])


def test_the_bench_readme_states_its_runs():
    """docs/h100/bench/README.md: every ratio, the band and the targets computed from bench.csv and the runs."""
    from workshop_lib import lessons
    from workshop_lib.bench import run_dir_name

    bench = ROOT / "docs" / "h100" / "bench"
    text = " ".join((bench / "README.md").read_text().split())
    table = pd.read_csv(bench / "bench.csv").set_index("row")
    w, med = table["window tokens/s"], table["steady tokens/s"]
    for row in w.index.drop("plain PyTorch (ceiling)"):  # the window figure is the runs' own
        run = bench / "runs" / run_dir_name(row)
        assert w[row] == json.loads((run / "results.json").read_text())["steady_window_tokens_per_second"]
        if "logging every" not in row and "all three" not in row:  # a train_log.csv row per step: computed again
            assert abs(w[row] - _window_tokens_per_second(run)) < 0.01 * w[row]
    z2, z3, off = w["default ZeRO-2"], w["default ZeRO-3"], w["default ZeRO-2 + CPU offload"]
    ceiling = w["plain PyTorch (ceiling)"]
    assert f"| 0.9x of the plain PyTorch ceiling | {z2 / ceiling:.2f}x; the three levers together " \
           f"{w['A/B: ZeRO-2, all three'] / ceiling:.2f}x | no |" in text.replace("default ZeRO-2 at least ", "| ")
    assert f"| {z3 / z2:.2f}x | no |" in text and z3 / z2 < 0.6
    acc4 = w["A/B: ZeRO-2 + CPU offload, 4 x 32k tokens (accumulation 4)"]
    assert f"| {acc4 / z2:.2f}x (accumulation 4: four times the global batch); {off / z2:.2f}x at the same" in text
    assert max(w[[r for r in w.index if "offload" in r.lower()]]) == acc4 and acc4 / z2 < 0.7
    band = lessons.band("steady_train_tokens_per_second")
    assert f"±{100 * band:.0f}%" in text
    levers = {"no gradient norm (max_grad_norm 0: no clipping)": "no gradient norm", "overlap_comm off (one GPU)":
              "overlap_comm off", "no per-step host syncs (logging every 8 steps)": "no per-step host syncs",
              "all three": "all three", "2 data loader workers": "2 data loader workers",
              "bf16 overflow check (DeepSpeed's default)": "overflow check back on"}
    for row, words in levers.items():
        ratio = w[f"A/B: ZeRO-2, {row}"] / z2
        assert abs(ratio - 1) <= band, row  # "Each is within the noise"
        assert re.search(re.escape(words) + r"[^;.]*: " + re.escape(f"{ratio:.2f}x"), text), (row, ratio)
    persistent, compiled = (w[f"A/B: ZeRO-3, {r}"] / z3 for r in ("every parameter persistent (one GPU)",
                                                                  "torch.compile"))
    assert f"{persistent:.2f}x of default ZeRO-3, within the noise" in text and abs(persistent - 1) <= band
    assert f"(`--torch-compile-zero3 true`) {compiled:.2f}x, slower" in text and compiled < 1 - band
    bound = w["A/B: ZeRO-2 + CPU offload, cores bound (DeepSpeed's --bind_cores_to_rank)"] / off
    assert f"{bound:.2f}x of plain offload, within the noise" in text and abs(bound - 1) <= band
    assert f"optimizer step {acc4 / off:.2f}x" in text
    zf = "A/B: ZeRO-2 + CPU offload, ZenFlow"
    assert f"{w[zf] / off:.2f}x of plain offload over the window" in text and w[zf] / off < 1 - band
    assert f"figure reads {med[zf] / med['default ZeRO-2 + CPU offload']:.2f}x" in text
    first = {r: pd.read_csv(bench / "runs" / run_dir_name(r) / "train_log.csv")["loss"].iloc[0]
             for r in (zf, "default ZeRO-2 + CPU offload", "default ZeRO-2")}
    assert f"{first[zf]:.4f} against {first['default ZeRO-2 + CPU offload']:.4f} for plain offload" in text
    assert first["default ZeRO-2 + CPU offload"] == first["default ZeRO-2"] != first[zf]  # same batch, same model


def test_the_bench_profiles_state_where_zero2s_step_goes():
    """docs/h100/bench/README.md's profile section: per-step GPU kernel time, gradient hooks and collation of default
    ZeRO-2 and of its three levers, computed from the two profile.txt (3 steps each)."""
    bench = H100 / "bench"
    text = " ".join((bench / "README.md").read_text().split())
    got = {}
    for name in ("default", "levers"):
        prof = (bench / "profile" / name / "profile.txt").read_text()
        row = {}
        for line in prof.splitlines():  # the first table (by GPU time) first; CPU totals agree in both
            if line.strip():
                row.setdefault(line.split()[0], re.split(r"\s{2,}", line.strip()))
        cpu = lambda op: float(row[op][4].removesuffix("ms")) / 3  # noqa: E731, B023 - CPU total per step
        got[name] = {"gpu": float(re.search(r"Self CUDA time total: ([\d.]+)ms", prof).group(1)) / 3,
                     "acc": cpu("torch::autograd::AccumulateGrad"),
                     "calls": int(row["torch::autograd::AccumulateGrad"][-1]) // 3,
                     "collate": cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter._..."),
                     "norms": int(row["aten::linalg_vector_norm"][-1]) // 3 if "aten::linalg_vector_norm" in row else 0,
                     "syncs": "cudaStreamSynchronize" in row}
    d, lv = got["default"], got["levers"]
    ceiling = pd.read_csv(bench / "bench.csv").set_index("row").loc["plain PyTorch (ceiling)", "steady s/step"]
    assert f"GPU kernels: {d['gpu']:.1f} ms for default ZeRO-2, {lv['gpu']:.1f} ms with the levers; the ceiling's " \
           f"whole step in the table is {1000 * ceiling:.0f} ms" in text
    assert f"the {d['norms']} per-tensor gradient norms" in text and lv["norms"] == 0 and d["syncs"] and not lv["syncs"]
    assert f"{d['calls']} `AccumulateGrad` calls" in text and lv["calls"] == d["calls"]
    assert f"{d['acc']:.1f} ms of host time, {lv['acc']:.1f} ms with the levers" in text
    assert f"collation in the training loop, {d['collate']:.1f} ms, {lv['collate']:.1f} ms with the levers" in text


def _window_tokens_per_second(run: Path) -> float:
    """All the tokens of a run's steady steps over their summed step times (train_log.csv, results.json's warm-up)."""
    log = pd.read_csv(run / "train_log.csv").dropna(subset=["step_time_s"])
    steady = log.iloc[json.loads((run / "results.json").read_text())["warmup_steps"]:]
    return steady["tokens"].sum() / steady["step_time_s"].sum()


def test_the_gap_readme_states_its_runs():
    """docs/h100/bench-gap: the targets' ratios, ZenFlow's two kinds of steps, throughput, loss and host memory,
    the persistence and core-binding A/Bs and the profile's per-step figures, each as the README states it,
    computed from the committed runs, table and profile."""
    gap = H100 / "bench-gap"
    text = " ".join((gap / "README.md").read_text().split())
    runs = {d.name: d for d in (gap / "runs").iterdir()}
    window = {n: _window_tokens_per_second(d) for n, d in runs.items()}
    table = pd.read_csv(gap / "bench.csv").set_index("row")
    z2, off = window["default_ZeRO-2"], window["default_ZeRO-2_plus_CPU_offload"]
    zf, acc4 = window["A_B_ZeRO-2_plus_CPU_offload_ZenFlow"], window[
        "A_B_ZeRO-2_plus_CPU_offload_4_x_32k_tokens_accumulation_4"]
    ceiling = table.loc["default ZeRO-2", "steady tokens/s"] / table.loc["plain PyTorch (ceiling)", "steady tokens/s"]
    assert f"| default ZeRO-2 at least 0.9x of the plain PyTorch ceiling | {ceiling:.2f}x | no |" in text
    assert f"| default ZeRO-3 at least 0.6x of default ZeRO-2 | {window['default_ZeRO-3'] / z2:.2f}x | no |" in text
    assert f"| {max(acc4, zf, off) / z2:.2f}x (accumulation 4" in text and f"{off / z2:.2f}x at the same global" in text
    assert f"1.{round(100 * window['A_B_ZeRO-3_every_parameter_persistent_one_GPU'] / window['default_ZeRO-3']) - 100:02d}x of default ZeRO-3, within the noise" in text
    steps = sorted(pd.read_csv(runs["A_B_ZeRO-2_plus_CPU_offload_ZenFlow"] / "train_log.csv")
                   .dropna(subset=["step_time_s"])["step_time_s"].iloc[8:])
    fast, slow = statistics.median(steps[:8]), statistics.median(steps[8:])
    assert slow > 2.5 * fast and f"(median {fast:.2f} s)" in text and f"(median {slow:.2f} s)" in text
    r_zf, r_off = (json.loads((runs[n] / "results.json").read_text())
                   for n in ("A_B_ZeRO-2_plus_CPU_offload_ZenFlow", "default_ZeRO-2_plus_CPU_offload"))
    assert f"median-based {r_zf['steady_train_tokens_per_second']:,.0f} tokens/s" in text
    assert (f"{zf / off:.2f}x as fast as plain offload, with a train loss "
            f"{r_zf['train_loss'] - r_off['train_loss']:.2f} nats higher and a host peak RSS "
            f"{r_zf['host_peak_rss_mib'] / r_off['host_peak_rss_mib']:.2f}x as large") in text
    assert f"{acc4 / off:.2f}x plain offload over the window" in text
    cb = {n: json.loads((gap / "core-binding" / n / "results.json").read_text())["steady_train_tokens_per_second"]
          for n in ("plain", "bound", "plain2")}
    assert min(cb["plain"], cb["plain2"]) <= cb["bound"] <= max(cb["plain"], cb["plain2"])
    assert f"{cb['plain']:,.0f}, {cb['bound']:,.0f} and {cb['plain2']:,.0f}" in text
    assert f"differed by {max(cb['plain'], cb['plain2']) / min(cb['plain'], cb['plain2']):.2f}x" in text
    assert "'numactl', '-m', '0', '-C', '0-15'" in (gap / "core-binding" / "bound.log").read_text()
    prof = (gap / "profile" / "profile.txt").read_text()
    row = {line.split()[0]: re.split(r"\s{2,}", line.strip()) for line in prof.splitlines() if line.strip()}
    per_step = lambda name, col: float(row[name][col].removesuffix("ms")) / 3  # noqa: E731 - 3 steps profiled
    gpu = float(re.search(r"Self CUDA time total: ([\d.]+)ms", prof).group(1)) / 3
    assert f"{gpu:.0f} ms of GPU kernels" in text and f"({1000 * table.loc['plain PyTorch (ceiling)', 'steady s/step']:.0f} ms" in text
    assert f"collation {per_step('enumerate(DataLoader)#_SingleProcessDataLoaderIter._...', 4):.1f} ms" in text
    acc = row["torch::autograd::AccumulateGrad"]
    assert f"{int(acc[-1]) // 3} `AccumulateGrad` calls (ZeRO-2's per-parameter gradient hooks) {per_step('torch::autograd::AccumulateGrad', 4):.1f} ms" in text
    assert f"{int(row['aten::linalg_vector_norm'][-1]) // 3} per-tensor gradient norms" in text


def test_the_smallest_gpu_the_readme_names_held_every_run_of_those_notebooks():
    """docs/h100/gpu40/peaks.txt (an H100 made to look like a 40 GB GPU): every run's NVML peak below the share of
    the GPU PyTorch could use, at the 8,192-token micro-batches the README names, for the notebooks it names."""
    rows = [line.split() for line in (H100 / "gpu40" / "peaks.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    for notebook, run, tokens, peak, total, fraction in rows:
        assert float(peak) < float(fraction) * float(total), (notebook, run)
    limit = float(rows[0][5]) * float(rows[0][4])
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"an H100 limited to {limit:,.0f} MiB this way, where 01, 02, 03 and 03b ran end to end with "
            f"{max(int(r[2]) for r in rows if r[1] == 'baseline'):,}-token micro-batches") in readme
    assert {r[0] for r in rows} == {"01", "02", "03", "03b"}


def test_the_first_run_penalty_the_readme_states_is_the_logs():
    """docs/h100/first-run: the ratio of a process's first stage2 run to its later one, in both logs, as the
    README states it, and below the 0.7 that makes it a finding rather than noise (runs of one process differ
    by less than that there)."""
    text = " ".join((H100 / "first-run" / "README.md").read_text().split())
    for log in ("first_run", "reset"):
        rows = [line.split(maxsplit=5) for line in (H100 / "first-run" / f"{log}.log").read_text().splitlines()]
        first, later = [int(r[3]) for r in rows if r[2] == "stage2"]
        assert first / later < 0.7
        assert f"{first / later:.2f}x" in text


def test_the_warm_up_the_readme_states_is_the_logs():
    """docs/h100/first-run: stage2 after a warm-up of 4 steps against after one of 24, as the README states it,
    and a finding (below 0.7), not noise."""
    text = " ".join((H100 / "first-run" / "README.md").read_text().split())
    speed = {}
    for steps in (4, 24):
        lines = (H100 / "first-run" / f"warm_up{steps}.log").read_text().splitlines()
        assert lines[0].split()[:4] == ["DIAG", "warm-up", str(steps), "steps"]
        run = lines[1].split(maxsplit=5)
        assert run[2] == "stage2"
        speed[steps] = int(run[3])
    assert speed[4] / speed[24] < 0.7
    assert f"after 4 steps of warm-up, stage2 ran at {speed[4]:,} tokens/s, after 24 at {speed[24]:,}: " \
           f"{speed[4] / speed[24]:.2f}x" in text.lower()


def test_the_course_reference_speed_band_is_narrow_and_its_baseline_agrees_with_its_repeat():
    """docs/h100/course: made with the warm-up, one process per notebook, its speed band is below the 0.2 its
    README promises, and the baseline (the first run of 01) agrees with its repeat within that band."""
    from workshop_lib import lessons

    text = " ".join((H100 / "course" / "README.md").read_text().split())
    band = lessons.band("steady_train_tokens_per_second")
    assert band is not None and band < 0.2 and "checks that it is below 0.2" in text
    runs = lessons.reference()
    again = lessons._repeats(lessons.REFERENCE_DIR)["baseline"]["steady_train_tokens_per_second"]
    first = runs.at["baseline", "steady_train_tokens_per_second"]
    assert abs(first - again) / ((first + again) / 2) < band


def readme_layout() -> dict[str, str]:
    """The README's Layout block: folder ("slurm/") -> the text of its entry, continuation lines joined."""
    block = (ROOT / "README.md").read_text().split("## Layout")[1].split("```")[1]
    entries, folder = {}, None
    for line in block.strip().splitlines():
        if not line[0].isspace():
            folder, line = line.split(maxsplit=1)
            entries[folder] = ""
        entries[folder] += " " + line.strip()
    return entries


def test_readme_layout_names_every_module_script_and_batch_script_and_only_those():
    """Every module of workshop_lib/ and workshop_lib/lessons/ (but the package's own __init__.py), every file
    of scripts/ and slurm/ is named in its entry; every file named in an entry exists."""
    entries = readme_layout()
    for folder, text in entries.items():
        assert (ROOT / folder).is_dir(), folder
        named = set(re.findall(r"(?<![\w/.-])([\w/-]+\.(?:py|sh|slurm|def|toml))\b", text))
        missing = [n for n in named if not (ROOT / (n if "/" in n else folder + n)).is_file()]
        assert not missing, f"README's layout names {missing} under {folder}, which do not exist"
        if folder in ("workshop_lib/", "workshop_lib/lessons/", "scripts/", "slurm/"):
            files = {f.name for f in (ROOT / folder).iterdir() if f.is_file() and f.suffix not in (".pyc",)}
            if folder.startswith("workshop_lib"):
                files = {f for f in files if f.endswith(".py")} - ({"__init__.py"} if folder == "workshop_lib/" else set())
            assert files <= named, f"README's layout does not name {sorted(files - named)} under {folder}"


def test_package_docstring_names_every_module():
    import workshop_lib

    modules = {f.stem for f in (ROOT / "workshop_lib").glob("*.py")} - {"__init__"} | {"lessons"}
    named = set(re.findall(r"`(\w+)`", workshop_lib.__doc__))
    assert modules <= named, f"workshop_lib's docstring does not name {sorted(modules - named)}"


def test_the_zenflow_readme_says_what_its_summary_shows():
    """docs/h100/zenflow: ZenFlow slower than ZeRO-2 + CPU offload with both overlap settings, with more host
    memory, and a higher loss at every step after the first (about a nat on average), as its README says."""
    summary = (H100 / "zenflow" / "summary.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| ---")}
    speed, host = rows["steady_train_tokens_per_second"], rows["host_peak_rss_mib"]
    assert float(speed[1]) < float(speed[0]) and float(speed[3]) < float(speed[0])
    assert float(host[1]) > float(host[0]) and float(host[3]) > float(host[0])
    diffs = [[float(c) for c in cells[1:]] for step, cells in rows.items() if step.isdigit() and int(step) > 1]
    assert diffs and all(d > 0 for row in diffs for d in row)
    means = [float(m) for m in re.findall(r"mean ([+-][\d.]+) nats", summary)]
    assert len(means) == 2 and all(0.75 < m < 1.25 for m in means)
    text = " ".join((H100 / "zenflow" / "README.md").read_text().split())
    assert "slower, not faster" in text and "about a nat on average" in text


def test_readme_lists_every_environment_variable_from_its_table():
    from workshop_lib.variables import markdown_table

    assert markdown_table() in (ROOT / "README.md").read_text()


def test_the_activation_count_is_the_gpus_measurement():
    """`fit.qwen3_constants` against scripts/activation_bytes.py's H100 run: with SDPA (flash) and eager
    attention within 1% of the measured bytes per token per layer; compiled blocks keep less than the count."""
    from workshop_lib.fit import model_shape, qwen3_constants

    measured = json.loads((ROOT / "docs/h100/activations/summary.json").read_text())
    for model, rows in measured["models"].items():
        shape, s = model_shape(model), measured["seq"]
        flash = qwen3_constants(shape, flash_attention=True)[0]
        c, big_s = qwen3_constants(shape, flash_attention=False)
        eager = c + big_s * shape["num_attention_heads"] * s / shape["hidden_size"]  # eq. 1's S·a·s/h term
        assert rows["sdpa"]["C"] == pytest.approx(flash, rel=0.01), model
        assert rows["eager"]["C"] == pytest.approx(eager, rel=0.01), model
        assert rows["sdpa, compiled blocks"]["C"] < flash, model


def test_the_deepcompile_findings_are_the_logs():
    """docs/h100/deepcompile/README.md: the key alone never activates DeepCompile; the Trainer's torch_compile
    does, with a first step of minutes; on a fresh machine the first step did not end before the timeout."""
    d = ROOT / "docs/h100/deepcompile"

    def steps(name):
        return [(float(t), a == "True") for t, a in
                re.findall(r"^step \d+: ([\d.]+) s, deepcompile active: (\w+)", (d / name).read_text(), re.M)]

    assert all(not active for log in ("key_only.log", "ab_key_only.log") for _, active in steps(log))
    compiled = steps("trainer_compile.log")
    assert all(active for _, active in compiled) and round(compiled[0][0]) == 224
    assert max(t for t, _ in compiled[1:]) < 1
    assert not steps("ab_trainer_compile.log") and "rc=124" in (d / "ab_trainer_compile.log").read_text()
    readme = (d / "README.md").read_text()
    assert "first step took 224 s" in readme and "after 330 s" in readme
    import statistics

    on, off = [t for t, _ in steps("ab2_trainer_compile.log")], [t for t, _ in steps("ab2_key_only.log")]
    assert (round(on[0]), len(on), len(off)) == (255, 5, 12)
    fast, slow = statistics.median(on[1:]), statistics.median(off[4:])
    assert f"median of {fast:.3f} s" in readme and f"median of {slow:.3f} s" in readme
    assert f"{slow / fast:.1f}x" in readme and f"({min(off[4:]):.3f}-{max(off[4:]):.3f} s)" in readme
    assert "Launching compile passes: global_steps=5" in (d / "ab2_trainer_compile.log").read_text()
