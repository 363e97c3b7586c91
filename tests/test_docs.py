"""Figures in the docs come from committed runs: the README's H100 excerpt, docs/h100/report.csv and the
H200 scaling tables must match the results.json files they were made from. The README's layout and the
package docstring name every file and module there is, and nothing that is not."""

import json
import re
import statistics
from pathlib import Path

import pandas as pd

from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.results import exercise_table, load_results, scaling_table

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "docs" / "h100"
H200 = ROOT / "docs" / "h200"
REF = ROOT / "workshop_lessons" / "reference"  # the reference runs, package data
GUIDE = ROOT / "docs" / "guide.md"  # the README's reference: its figures, variables and layout


def test_h100_report_is_regenerated_from_the_committed_runs():
    table = exercise_table(load_results(REF / "h100" / "runs"))
    committed = pd.read_csv(H100 / "report.csv")
    assert len(table) == len(committed) == 8
    assert list(table["steady tokens/s"]) == list(committed["steady tokens/s"])
    assert list(table["GPU peak MiB"]) == list(committed["GPU peak MiB"])


def test_token_budget_tables_count_questions_not_micro_batches():
    """The Trainer's train_samples_per_second counts per_device_train_batch_size per micro-batch (4 in these
    token-budget runs), not questions: the tables show steady questions/s (questions per step / mean steady step),
    the micro-batch in tokens, and not the Trainer's figure."""
    df = load_results(REF / "h100" / "runs")
    r = df[(df["experiment"] == "baseline") & (df["recipe"] == "default")].iloc[0]
    assert r["config"]["batching"] == "token_budget" and r["micro_batch_size_per_gpu"] == 4
    steps = r["global_steps"] * r["micro_batch_size_per_gpu"] / r["train_runtime_seconds"]
    assert abs(r["train_samples_per_second"] - steps) < 0.01  # 4 per micro-batch, one micro-batch per step
    questions = r["data_stats"]["train"]["used"] / r["steps_per_epoch"]  # mean questions per optimizer step
    assert abs(r["steady_train_samples_per_second"] - questions / r["steady_step_time_s"]) < 0.01 * questions
    table = exercise_table(df)
    assert "samples/s" not in table and table["micro-batch"].iloc[0] == "≤32,768 tokens"
    committed = pd.read_csv(H100 / "report.csv")
    assert (
        list(committed["steady questions/s"])
        == list(table["steady questions/s"])
        == list(df["steady_train_samples_per_second"])
    )
    scaling = scaling_table(load_results(REF / "h200" / "default-x4" / "runs"))
    assert "samples/s" not in scaling and list(scaling["steady questions/s"]) == list(
        pd.read_csv(REF / "h200" / "default-x4" / "scaling.csv")["steady questions/s"]
    )
    # stage3 against stage2 on one GPU: slower in questions/s as in tokens/s (samples/s had it the other way)
    one = scaling[scaling["GPUs"] == 1].set_index("experiment")
    assert one.at["stage3", "steady questions/s"] < one.at["stage2", "steady questions/s"]
    assert one.at["stage3", "steady tokens/s"] < one.at["stage2", "steady tokens/s"]


def test_readme_excerpt_matches_the_runs():
    readme = GUIDE.read_text()
    rows = re.findall(
        r"^\| (baseline|stage2|stage2_offload|stage3_offload) \| ([\w.-]+), (\w+) \| ([\d,]+) \| [\d.]+% \| "
        r"([\d,]+) \|",
        readme,
        re.M,
    )
    assert len(rows) == 8
    for exp, model, recipe, tps, peak in rows:
        r = json.loads((REF / "h100" / "runs" / f"{model}-{recipe}-{exp}" / "results.json").read_text())
        assert abs(int(tps.replace(",", "")) - r["steady_train_tokens_per_second"]) < 1
        assert abs(int(peak.replace(",", "")) - r["gpu_peak_mib"]) < 1


def test_h200_scaling_tables_match_the_committed_runs():
    """Each row of docs/h200/README.md's tables against the scaling table `workshop report` makes from the runs."""
    text = (H200 / "README.md").read_text()
    for machine, n_rows in (("x4", 6), ("x2", 4)):
        section = text.split(f"## {machine[1]} x H200")[1].split("##")[0]
        rows = re.findall(
            r"^\| (stage[23]) \| (\d) \| \d+ \| ([\d.]+) \| ([\d.]+) \| (\d+)% \| ([\d,]+) \|", section, re.M
        )
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
    """workshop_lessons/reference/h200/default-x4/scaling.csv: steady tokens/s per GPU and efficiency as `workshop report` makes them."""
    scaling = scaling_table(load_results(REF / "h200" / "default-x4" / "runs"))
    committed = pd.read_csv(REF / "h200" / "default-x4" / "scaling.csv")
    assert committed.groupby("experiment")["GPUs"].apply(list).to_dict() == {
        "stage2": [1, 2, 4],
        "stage3": [1, 2, 4],
        "stage3_offload": [1, 2],
    }  # stage3_offload x4: the call's time ran out
    for col in ("steady tokens/s per GPU", "scaling efficiency", "peak GPU MiB per GPU"):
        assert list(scaling[col]) == list(committed[col])


def test_readme_h200_excerpt_matches_the_runs():
    readme = GUIDE.read_text()
    rows = re.findall(r"^\| (stage[23]\w*) \| (\d) \| ([\d,]+) \| (\d+%) \| ([\d,]+) \| ([\d,]+) \|", readme, re.M)
    scaling = scaling_table(load_results(REF / "h200" / "default-x4" / "runs"))
    assert len(rows) == len(scaling) == 8
    for exp, gpus, per_gpu, eff, peak, est in rows:
        r = scaling[(scaling["experiment"] == exp) & (scaling["GPUs"] == int(gpus))].iloc[0]
        assert (
            abs(int(per_gpu.replace(",", "")) - r["steady tokens/s per GPU"]) <= 0.5 and eff == r["scaling efficiency"]
        )
        assert abs(int(peak.replace(",", "")) - r["peak GPU MiB per GPU"]) <= 0.5
        assert abs(int(est.replace(",", "")) - r["est. model states GPU MiB"]) <= 0.5


def test_the_readme_fits_a_first_read():
    """The README: what it is, the set-up, main-job and test commands in the first screen, the notebooks table and
    pointers into docs/; at most 200 lines. docs/README.md indexes every entry of docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    first_screen = "\n".join(readme.splitlines()[:40])
    for command in ("bash scripts/setup.sh", "bash scripts/main.sh", "bash scripts/test.sh", "pytest"):
        assert command in first_screen, command
    index = (ROOT / "docs" / "README.md").read_text()
    assert all(f"]({p.name}" in index for p in (ROOT / "docs").iterdir() if p.name != "README.md")


def test_the_readme_types_no_time_or_count_of_its_own():
    """Every time and count in the README comes from a file a committed command writes (issue 40): the timetable,
    between its markers (`scripts/make_timetable.py`, from notebook_times.json). Outside it, no "N minutes",
    "N s", "N tests" or "N passed" is typed: such figures drifted from the machine before (set-up "about 4" and
    "about 8 minutes", "142 tests")."""
    readme = re.sub(r"<!-- timetable -->.*?<!-- /timetable -->", "", (ROOT / "README.md").read_text(), flags=re.S)
    typed = re.findall(r"[^\n]{0,40}\b\d[\d,.]*\s*(?:min|minutes?|s|seconds?|hours?|h|tests|passed)\b", readme)
    assert typed == [], typed


def test_every_notebook_keeps_the_language_info_the_server_extension_sets():
    """Every notebook's header keeps a Python language_info with a version: JupyterLab marks a notebook modified on
    opening where its kernel reports another, and the course's server extension (workshop_lessons/jupyter.py, in a
    browser in tests/test_browser.py) replaces that version by the kernel's as the notebook opens."""
    for p in [*ROOT.glob("solutions/[0-9]*.py"), *ROOT.glob("course/[0-9]*.py")]:
        info = re.search(r"^#   language_info:\n((?:#     .*\n|#       .*\n)*)", p.read_text(), re.M)
        assert info and "#     name: python\n" in info.group(1) and re.search(r"#     version: \S+", info.group(1)), p


def test_readme_lists_every_experiment():
    """The README's experiments table against ds_config.EXPERIMENTS: an experiment added in one is in both."""
    from workshop_lib.ds_config import EXPERIMENTS

    readme = (ROOT / "README.md").read_text()
    table = readme.split("## The experiments")[1].split("```")[0]
    assert re.findall(r"^\| `(\w+)` \|", table, re.M) == list(EXPERIMENTS)


def test_the_smallest_gpu_the_readme_names_held_every_run_of_those_notebooks():
    """docs/h100/gpu40/peaks.txt (an H100 made to look like a 40 GB GPU): every run's NVML peak below the share of
    the GPU PyTorch could use, at the 8,192-token micro-batches the README names, for the notebooks it names."""
    rows = [
        line.split()
        for line in (H100 / "gpu40" / "peaks.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for notebook, run, _tokens, peak, total, fraction in rows:
        assert float(peak) < float(fraction) * float(total), (notebook, run)
    limit = float(rows[0][5]) * float(rows[0][4])
    readme = " ".join(GUIDE.read_text().split())
    assert (
        f"an H100 limited to {limit:,.0f} MiB this way, where 01, 02, 03 and 03b ran end to end with "
        f"{max(int(r[2]) for r in rows if r[1] == 'baseline'):,}-token micro-batches"
    ) in readme
    assert {r[0] for r in rows} == {"01", "02", "03", "03b"}


def test_the_course_reference_speed_band_is_narrow_and_its_baseline_agrees_with_its_repeat():
    """workshop_lessons/reference/h100/course: made with the warm-up, one process per notebook, its speed band is below the 0.2 its
    README promises, and the baseline (the first run of 01) agrees with its repeat within that band."""
    import workshop_lessons as lessons

    text = " ".join((REF / "h100" / "course" / "README.md").read_text().split())
    band = lessons.band("steady_train_tokens_per_second")
    assert band is not None and band < 0.2 and "checks that it is below 0.2" in text
    runs = lessons.reference()
    again = lessons._repeats(lessons.REFERENCE_DIR)["baseline"]["steady_train_tokens_per_second"]
    first = runs.at["baseline", "steady_train_tokens_per_second"]
    assert abs(first - again) / ((first + again) / 2) < band


def readme_layout() -> dict[str, str]:
    """The README's Layout block: folder ("slurm/") -> the text of its entry, continuation lines joined."""
    block = GUIDE.read_text().split("## Layout")[1].split("```")[1]
    entries, folder = {}, None
    for line in block.strip().splitlines():
        if not line[0].isspace():
            folder, line = line.split(maxsplit=1)
            entries[folder] = ""
        entries[folder] += " " + line.strip()
    return entries


def test_readme_layout_names_every_module_script_and_batch_script_and_only_those():
    """Every module of workshop_lib/ and workshop_lessons/ (but the package's own __init__.py), every file
    of scripts/ and slurm/ is named in its entry; every file named in an entry exists."""
    entries = readme_layout()
    for folder, text in entries.items():
        assert (ROOT / folder).is_dir(), folder
        named = set(re.findall(r"(?<![\w/.-])([\w/-]+\.(?:py|sh|slurm|def|toml))\b", text))
        missing = [n for n in named if not (ROOT / (n if "/" in n else folder + n)).is_file()]
        assert not missing, f"README's layout names {missing} under {folder}, which do not exist"
        if folder in ("workshop_lib/", "workshop_lessons/", "scripts/", "slurm/"):
            files = {f.name for f in (ROOT / folder).iterdir() if f.is_file() and f.suffix not in (".pyc",)}
            if folder.startswith("workshop_lib"):
                files = {f for f in files if f.endswith(".py")} - (
                    {"__init__.py"} if folder == "workshop_lib/" else set()
                )
            if folder == "slurm/":  # <experiment>.slurm names the generated one per experiment (scripts/make_slurm.py)
                files -= {f"{name}.slurm" for name in EXPERIMENTS}
            assert files <= named, f"README's layout does not name {sorted(files - named)} under {folder}"


def test_package_docstring_names_every_module():
    import workshop_lib

    modules = {f.stem for f in (ROOT / "workshop_lib").glob("*.py")} - {"__init__"}
    named = set(re.findall(r"`(\w+)`", workshop_lib.__doc__))
    assert modules <= named, f"workshop_lib's docstring does not name {sorted(modules - named)}"


def test_readme_lists_every_environment_variable_from_its_table():
    from workshop_lib.variables import markdown_table

    assert markdown_table() in GUIDE.read_text()


def test_two_gpu_readme_states_its_runs():
    """workshop_lessons/reference/h200/x2-2026-11-26: every figure of its README computed from the runs, comm benchmarks and NCCL
    logs beside it."""
    from workshop_lessons.multi_gpu import stragglers

    d = REF / "h200" / "x2-2026-11-26"
    text = (d / "README.md").read_text()
    tps = {
        r.parent.relative_to(d).as_posix(): json.loads(r.read_text())["steady_train_tokens_per_second"]
        for r in d.glob("*/*/results.json")
    }
    for stage in ("stage2", "stage3"):
        one, two = tps[f"runs/{stage}-1gpu"], tps[f"runs/{stage}-nvlink"]
        assert f"| {stage} | {one:,.0f} | {two:,.0f} | {two / 2 / one:.0%} |" in text
        assert f"{tps[f'links/{stage}-sockets']:,.0f}" in text
    table = pd.read_csv(d / "report" / "scaling.csv")
    assert list(table["scaling efficiency"]) == ["100%", "90%", "100%", "92%"]
    bal, rnd = ([tps[f"ab/stage2-{v}-{i}"] for i in (1, 2)] for v in ("balanced", "unbalanced"))
    assert f"**{statistics.mean(bal) / statistics.mean(rnd):.2f}x**" in text
    assert (
        f"({abs(bal[0] - bal[1]) / statistics.mean(bal):.1%} and {abs(rnd[0] - rnd[1]) / statistics.mean(rnd):.1%})"
        in text
    )
    waits = [
        round(stragglers(d / "ab" / f"stage2-{v}-{i}").mean_waited_ms, 1)
        for v in ("balanced", "unbalanced")
        for i in (1, 2)
    ]
    assert f"{waits[0]} and {waits[1]} ms for the slower's\nbalanced, {waits[2]} and {waits[3]} ms" in text
    for link, name in (("nvlink", "NVLink (P2P/CUMEM)"), ("sockets", "sockets over loopback (NET/Socket)")):
        c = pd.read_csv(d / f"comm-{link}.csv").set_index("op")
        rs, ag = c.loc["reduce_scatter"].iloc[-1], c.loc["all_gather"].iloc[-1]
        assert f"| {name} | {rs['ms']:,.{2 if rs['ms'] < 10 else 1}f} ms |" in text
        assert f"{ag['ms']:,.{2 if ag['ms'] < 10 else 1}f} ms" in text
    assert "via P2P/CUMEM" in (d / "nccl-nvlink.txt").read_text()
    assert "via NET/Socket/0" in (d / "nccl-sockets.txt").read_text()


def _links_table_is_stated(d: Path, text: str) -> dict:
    """The links table, the sockets/NVLink step ratios and the runs' tokens/s of a two-nodes-on-one-host folder
    (`multi_gpu.links`) as its README states them; returns the runs' steady tokens/s by folder name."""
    from workshop_lessons.multi_gpu import links

    t = links(d).set_index("link")
    tps = {p.parent.name: json.loads(p.read_text())["steady_train_tokens_per_second"] for p in d.glob("*/results.json")}
    for link, name in (("nvlink", "NVLink"), ("sockets", "sockets over loopback")):
        rs, ag = (
            f"{t.at[link, f'{op} ms ({mib} MiB)']:.{2 if link == 'nvlink' else 1}f} ms, "
            f"{t.at[link, f'{op} bus GB/s']:.1f} GB/s bus"
            for op, mib in (("reduce_scatter", "954"), ("all_gather", "1,137"))
        )
        assert (
            f"| {name} | {t.at[link, 'NCCL transport']} | {rs} | {ag} | {t.at[link, 'stage2 s/step']:.3f} | "
            f"{t.at[link, 'stage3 s/step']:.3f} |"
        ) in text
    for stage in ("stage2", "stage3"):
        assert f"**{t.at['sockets', f'{stage} s/step'] / t.at['nvlink', f'{stage} s/step']:.2f}x**" in text
    assert (
        f"ZeRO-2 {tps['stage2-nvlink']:,.0f} over NVLink and {tps['stage2-sockets']:,.0f} over sockets, ZeRO-3 "
        f"{tps['stage3-nvlink']:,.0f} and {tps['stage3-sockets']:,.0f}"
    ) in text
    assert (
        "via P2P/CUMEM" in (d / "nccl-nvlink.txt").read_text()
        and "via NET/Socket/0" in (d / "nccl-sockets.txt").read_text()
    )
    return tps


def test_links_readme_states_its_runs():
    """workshop_lessons/reference/h100/links-2026-11-28 (notebook 04's links, `multi_gpu.LINKS`): each figure of
    its README from the comm benchmarks, NCCL lines and runs beside it, and the reference's bucket arithmetic."""
    from workshop_lessons import multi_gpu

    d = multi_gpu.LINKS
    text = (d / "README.md").read_text()
    _links_table_is_stated(d, text)
    t = multi_gpu.links(d).set_index("link")
    grew = {s: 1000 * (t.at["sockets", f"{s} s/step"] - t.at["nvlink", f"{s} s/step"]) for s in ("stage2", "stage3")}
    assert f"ZeRO-2's step grew by {grew['stage2']:.0f} ms, ZeRO-3's by {grew['stage3']:.0f} ms" in text
    cfg = json.loads((d / "stage2-nvlink" / "ds_config.json").read_text())
    params = json.loads((d / "stage2-nvlink" / "results.json").read_text())["num_params"]
    assert f"fills at {multi_gpu.buckets(cfg, params).first_sent_at:.0%} of it" in text
    assert {json.loads(p.read_text())["device"] for p in d.glob("*/results.json")} == {"NVIDIA H100 80GB HBM3"}


def test_h200_links_readme_states_its_runs():
    """workshop_lessons/reference/h200/links-2026-11-27 (history): each figure of its README from the comm
    benchmarks, NCCL lines and runs beside it."""
    d = REF / "h200" / "links-2026-11-27"
    text = (d / "README.md").read_text()
    tps = _links_table_is_stated(d, text)
    one, two = tps["stage2-1gpu"], tps["stage2-2gpu"]
    assert f"1 GPU: {one:,.0f} tokens/s; alone on 2 GPUs: {two:,.0f} tokens/s, **{two / 2 / one:.0%}**" in text
    assert f"same call, {tps['stage2-nvlink'] / 2 / one:.0%})" in text


def _steady_median(run: Path, col: str = "forward_ms") -> float:
    """The median of `col` over a run's steady steps (after its `warmup_steps`): `forward_ms` over the steady
    micro-batches of micro_batches.csv, any other column over the logged steps of train_log.csv."""
    warm = json.loads((run / "results.json").read_text())["warmup_steps"]
    if col == "forward_ms":
        mb = pd.read_csv(run / "micro_batches.csv")
        return mb[mb["step"] > warm][col].median()
    return pd.read_csv(run / "train_log.csv").dropna(subset=[col])[col].iloc[warm:].median()


def test_run_order_readme_states_its_runs():
    """docs/h100/run-order: each figure of its README from the runs beside it (scripts/run_order.py)."""
    import workshop_lessons as lessons

    d = H100 / "run-order"
    text = (d / "README.md").read_text()
    tps = {
        p.parent.name: json.loads(p.read_text())["steady_train_tokens_per_second"]
        for p in d.glob("runs/*/results.json")
    }
    first, fourth, seventh = tps["1-stage2"], tps["4-stage2"], tps["7-stage2"]
    assert (
        f"stage2 fourth and seventh: {fourth:,.0f} and {seventh:,.0f} tokens/s (the seventh {seventh / fourth:.2f}x"
        in text
    )
    assert (
        f"baseline second and sixth: {tps['2-baseline']:,.0f} and {tps['6-baseline']:,.0f} ({tps['6-baseline'] / tps['2-baseline']:.2f}x)"
        in text
    )
    assert f"(±{lessons.band('steady_train_tokens_per_second'):.1%})" in text
    assert f"stage2 first: {first:,.0f} tokens/s, {first / fourth:.2f}x of the fourth" in text

    first_fw, fourth_fw = (_steady_median(d / "runs" / r) for r in ("1-stage2", "4-stage2"))
    assert f"a median of {first_fw:.1f} ms over its steady steps against {fourth_fw:.1f} ms" in text
    logs = {
        r: pd.read_csv(d / "runs" / r / "train_log.csv").dropna(subset=["step_time_s"])
        for r in ("1-stage2", "4-stage2")
    }
    assert all(log["compiles"].iloc[2:].eq(0).all() for log in logs.values())
    shapes = [pd.read_csv(d / "runs" / r / "micro_batches.csv")[["sequences", "length"]] for r in logs]
    assert shapes[0].equals(shapes[1])
    band = lessons.band("steady_train_tokens_per_second")  # the first run and the later ones, within it
    assert all(
        abs(a / b - 1) <= band for a, b in ((first, fourth), (seventh, fourth), (tps["6-baseline"], tps["2-baseline"]))
    )


def test_two_h100_reference_readme_states_its_runs():
    """workshop_lessons/reference/h100/x2-2026-11-28 (notebook 04's reference, `multi_gpu.REFERENCE`): each figure of
    its README from its runs, its A/B (`multi_gpu.bucket_ab`) and links, and notebook 04's time on that machine from
    notebook_times.json."""
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu

    d = multi_gpu.REFERENCE
    text = " ".join((d / "README.md").read_text().split())  # a phrase reads the same across a line break
    times = json.loads((lessons.REFERENCE / "notebook_times.json").read_text())
    seconds = times["2 x NVIDIA H100 80GB HBM3"]["04_multi_gpu"]["seconds"]
    build = int(re.search(r"compiled in (\d+) s", (d / "runs" / "stage3-1" / "launch.log").read_text())[1])
    assert f"**{seconds:.0f} s**" in text and f"fused_adam op compiled in {build} s" in text
    assert f"04 takes about {round(seconds - build, -1):.0f} s" in text
    assert f"**±{lessons.band('steady_train_tokens_per_second', root=d):.1%}**" in text
    tables = {
        part: scaling_table(load_results(d / part)).set_index(["experiment", "GPUs"]) for part in ("runs", "repeat")
    }
    for part, st in tables.items():
        for e in ("stage2", "stage3"):
            tps = st["steady tokens/s"]
            assert (
                f"| {part} | {e} | {tps[(e, 1)]:,.0f} | {tps[(e, 2)]:,.0f} | {st.at[(e, 2), 'scaling efficiency']} |"
                in text
            )
    for e, name in (("stage2", "ZeRO-2"), ("stage3", "ZeRO-3")):
        one, two = (statistics.mean(st.at[(e, n), "steady tokens/s"] for st in tables.values()) for n in (1, 2))
        assert f"**{two / 2 / one:.0%}** ({name})" in text

    def median(part, run, col="forward_ms"):
        return _steady_median(d / part / run, col)

    assert (
        f"{median('runs', 'stage3-1'):.1f} ms on 1 GPU and {median('runs', 'stage3-2'):.1f} ms on 2 in `runs/`, and "
        f"{median('repeat', 'stage3-1'):.1f} ms and {median('repeat', 'stage3-2'):.1f} ms"
    ) in text
    zero2 = [median(part, f"stage2-{n}") for part in ("runs", "repeat") for n in (1, 2)]
    assert f"within {min(zero2):.1f} to {max(zero2):.1f} ms in all four runs" in text
    waits = {
        part: {r: multi_gpu.stragglers(d / part / r).mean_waited_ms for r in ("stage2-2", "stage3-2")}
        for part in ("runs", "repeat")
    }
    step3 = median("runs", "stage3-2", "step_time_s")
    assert (
        f"waited {waits['runs']['stage2-2']:.1f} ms a step on average for the slower's "
        f"({waits['repeat']['stage2-2']:.1f} ms in the repeat)"
    ) in text
    assert (
        f"{waits['runs']['stage3-2']:.1f} ms and {waits['repeat']['stage3-2']:.1f} ms, about "
        f"{waits['runs']['stage3-2'] / 1000 / step3:.0%} of its {step3:.3f} s step"
    ) in text
    ab = multi_gpu.bucket_ab()
    assert len(ab) == 2 and f"**{ab[0].band_text}**" in text
    for part, c in zip(("runs", "repeat"), ab):
        assert f"| {part} | {c.value:,.0f} | {c.other:,.0f} | {c.ratio:.2f}x | {c.verdict} |" in text
    assert all(c.verdict == "within the band" for c in ab) and "Both pairs are within the noise" in text
    steps = [median(f"ab/{part}", "stage2-recipe-buckets", "step_time_s") * 1000 for part in ("runs", "repeat")]
    assert f"a step of {min(steps):.0f}-{max(steps):.0f} ms" in text
    rs = multi_gpu.links(multi_gpu.LINKS).set_index("link").at["nvlink", "reduce_scatter ms (954 MiB)"]
    assert f"reduced in about {rs:.0f} ms" in text
    sizes = {
        p.parent.name: json.loads(p.read_text())["zero_optimization"]["reduce_bucket_size"]
        for p in d.glob("ab/*/*/ds_config.json")
    }
    assert sizes == {"stage2-small-buckets": 50_000_000, "stage2-recipe-buckets": 500_000_000}
    assert {json.loads(p.read_text())["device"] for p in d.glob("**/results.json")} == {"NVIDIA H100 80GB HBM3"}
    assert {json.loads(p.read_text())["dataloader_num_workers"] for p in d.glob("**/run_config.json")} == {2}


def test_earlier_two_h100_reference_with_prefetch_readme_states_its_runs():
    """workshop_lessons/reference/h100/x2-2026-11-27b (history: collation in the training loop, ZeRO-3 prefetching
    5e7 elements): each figure of its README from its runs."""
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu

    d = REF / "h100" / "x2-2026-11-27b"
    text = (d / "README.md").read_text()
    for part in ("runs", "repeat"):
        st = scaling_table(load_results(d / part)).set_index(["experiment", "GPUs"])
        tps = st["steady tokens/s"]
        if part == "runs":
            for e in ("stage2", "stage3"):
                assert (
                    f"| {e} | {tps[(e, 1)]:,.0f} | {tps[(e, 2)]:,.0f} | {st.at[(e, 2), 'scaling efficiency']} |" in text
                )
        else:
            assert f"gives {st.at[('stage3', 2), 'scaling efficiency']}" in text
            assert f"({tps[('stage3', 1)]:,.0f} and {tps[('stage3', 2)]:,.0f} tokens/s)" in text
        waits = multi_gpu.stragglers(d / part / "stage3-2")
        steady = waits.steps.loc[waits.steady_from :].nlargest(3, "waited_ms")
        assert (steady["length_0"] - steady["length_1"]).abs().max() <= 16
    assert f"**±{lessons.band('steady_train_tokens_per_second', root=d):.1%}**" in text
    assert f"waited {multi_gpu.stragglers(d / 'runs' / 'stage2-2').mean_waited_ms:.1f} ms a step" in text
    assert (
        f"{multi_gpu.stragglers(d / 'runs' / 'stage3-2').mean_waited_ms:.1f} ms here and "
        f"{multi_gpu.stragglers(d / 'repeat' / 'stage3-2').mean_waited_ms:.1f} ms in the repeat"
    ) in text

    def medians(run):
        return _steady_median(d / "runs" / run), _steady_median(d / "runs" / run, "step_time_s")

    (f1, s1), (f2, s2) = medians("stage3-1"), medians("stage3-2")
    assert f"from {f1:.1f} ms to {f2:.1f} ms" in text and f"from {s1:.3f} s to {s2:.3f} s" in text
    assert {json.loads(p.read_text())["device"] for p in d.glob("*/*/results.json")} == {"NVIDIA H100 80GB HBM3"}
    assert {
        json.loads(p.read_text())["zero_optimization"]["stage3_prefetch_bucket_size"]
        for p in d.glob("*/stage3-*/ds_config.json")
    } == {50_000_000}


def test_earlier_two_h100_reference_readme_states_its_runs():
    """workshop_lessons/reference/h100/x2-2026-11-27 (history: HF's "auto" ZeRO-3 prefetch): each figure of its
    README from its runs."""
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu

    d = REF / "h100" / "x2-2026-11-27"
    text = (d / "README.md").read_text()
    st = scaling_table(load_results(d / "runs")).set_index(["experiment", "GPUs"])
    tps = st["steady tokens/s"]
    for e in ("stage2", "stage3"):
        assert f"| {e} | {tps[(e, 1)]:,.0f} | {tps[(e, 2)]:,.0f} | {st.at[(e, 2), 'scaling efficiency']} |" in text
    assert f"**±{lessons.band('steady_train_tokens_per_second', root=d):.1%}**" in text
    assert "2.6 ms" in text and f"{multi_gpu.stragglers(d / 'runs' / 'stage2-2').mean_waited_ms:.1f} ms" in text
    assert f"{multi_gpu.stragglers(d / 'runs' / 'stage3-2').mean_waited_ms:.1f} ms a step" in text

    def medians(run):
        return _steady_median(d / "runs" / run), _steady_median(d / "runs" / run, "step_time_s")

    (f1, s1), (f2, s2), (g1, _) = medians("stage3-1"), medians("stage3-2"), medians("stage2-1")
    assert f"from {s1:.3f} s to {s2:.3f} s" in text and f"from {f1:.1f} ms to {f2:.1f} ms" in text
    assert f"{f1 / g1:.1f}x ZeRO-2's ({g1:.1f} ms)" in text
    assert {json.loads(p.read_text())["device"] for p in d.glob("*/*/results.json")} == {"NVIDIA H100 80GB HBM3"}


def test_two_h200_notebook_and_bucket_ab_readme_states_its_runs():
    """workshop_lessons/reference/h200/x2-2026-11-27 (notebook 04 timed, exercise 7's A/B): each figure of its
    README from its runs and notebook_times.json."""
    import workshop_lessons as lessons
    from workshop_lessons import multi_gpu

    d = REF / "h200" / "x2-2026-11-27"
    text = (d / "README.md").read_text()
    times = json.loads((lessons.REFERENCE / "notebook_times.json").read_text())
    assert f"**{times['2 x NVIDIA H200']['04_multi_gpu']['seconds']:.0f} s**" in text
    nb = d / "notebook" / "04_multi_gpu"
    st = scaling_table(load_results(nb)).set_index(["experiment", "GPUs"])
    tps = st["steady tokens/s"]
    for e in ("stage2", "stage3"):
        assert f"| {e} | {tps[(e, 1)]:,.0f} | {tps[(e, 2)]:,.0f} | {st.at[(e, 2), 'scaling efficiency']} |" in text
    assert f"{multi_gpu.stragglers(nb / 'stage2-2').mean_waited_ms:.1f} ms a step under ZeRO-2" in text
    assert f"{multi_gpu.stragglers(nb / 'stage3-2').mean_waited_ms:.1f} ms under ZeRO-3" in text
    ab = multi_gpu.bucket_ab(d / "ab")
    assert len(ab) == 2 and f"**{ab[0].band_text}**" in text
    for part, c in zip(("runs", "repeat"), ab):
        assert f"| {part} | {c.value:,.0f} | {c.other:,.0f} | {c.ratio:.2f}x | {c.verdict} |" in text
    sizes = {
        p.parent.name: json.loads(p.read_text())["zero_optimization"]["reduce_bucket_size"]
        for p in d.glob("ab/*/*/ds_config.json")
    }
    assert sizes == {"stage2-small-buckets": 50_000_000, "stage2-recipe-buckets": 500_000_000}
    assert {json.loads(p.read_text())["device"] for p in d.glob("**/results.json")} == {"NVIDIA H200"}


def _flat(path: Path) -> str:
    """A notebook's text with the comment marks dropped and whitespace joined: a phrase reads the same whether a
    line break falls inside it or not (markdown cells and the strings of code cells alike)."""
    return " ".join(re.sub(r"^#+ ?", "", line).strip() for line in path.read_text().splitlines()).replace("  ", " ")


def test_the_ladder_is_the_courses_order_with_the_reference_ratios_that_order_it():
    """03c (both versions) and fit.LADDER's comment call the ladder's order the course's own, not HF Transformers'
    DeepSpeed guide's (which tries ZeRO-2 + CPU offload before ZeRO-3 and more hardware only last), and 03c gives
    why from the reference runs: offload the slowest, against ZeRO-3 on two H200s (both with activation
    checkpointing) and against activation checkpointing alone on one H100 (Qwen3-4B: the ratio exercise 2 reads)."""
    from workshop_lessons import large_models as lm
    from workshop_lib import fit

    x2 = lm.reference_runs(lm.REFERENCES[lm.X2]).set_index("experiment")
    assert x2["activation checkpointing"].all() and set(x2["GPUs"]) == {2} and set(x2["model"]) == {"Qwen/Qwen3-8B"}
    zero3 = x2.at["stage3", "steady tokens/s"] / x2.at["stage3_offload", "steady tokens/s"]
    ac = lm.checkpointing_against_offload()
    assert ac.model == "Qwen/Qwen3-4B" and ac.torch_compile == (True, False)  # what the sentence says of them
    assert zero3 > 1 and ac.tokens_per_second.ratio > 1  # offload the slower in both
    for nb in (ROOT / "solutions" / "03c_models_that_do_not_fit.py", ROOT / "course" / "03c_models_that_do_not_fit.py"):
        c = _flat(nb)
        assert "The order is the course's own, the cheapest in speed first" in c and "order practitioners" not in c
        assert f"Qwen3-8B with ZeRO-3 trained {zero3:.1f}x faster than with ZeRO-3 + CPU offload" in c, nb.name
        assert f"Qwen3-4B with activation checkpointing alone {ac.tokens_per_second.ratio:.1f}x faster" in c, nb.name
        assert "but tries ZeRO-2 + CPU offload before ZeRO-3 and adds hardware only at its last step" in c
    comment = " ".join((ROOT / "workshop_lib" / "fit.py").read_text().replace("#", " ").split())
    assert "The ladder, in the course's own order, the cheapest in speed first" in comment
    assert "but tries ZeRO-2 + CPU offload before ZeRO-3 and adds hardware only at its last step" in comment
    # where the course's order differs from the guide's: ZeRO-3 before any offload, more GPUs before offload
    assert fit.LADDER.index("ZeRO-3") < fit.LADDER.index("ZeRO-2 + CPU offload")


def test_figures_the_notebooks_type_are_the_code_constants():
    """03b's and 03c's prose states a few figures of the code (a constant, DeepSpeed's estimator) or of the
    reference machine: each is the code's value, so a change of the code fails here instead of leaving the text
    wrong. (course/ is generated from solutions/ and checked to be current.)"""
    from deepspeed.runtime.swap_tensor.utils import MIN_AIO_BYTES

    from workshop_lessons import large_models
    from workshop_lib import checkpoint, fit, memory
    from workshop_lib.config import RunConfig
    from workshop_lib.ds_config import Settings, build_ds_config
    from workshop_lib.units import MiB

    b = _flat(ROOT / "solutions" / "03b_the_fine_tuned_model.py")
    assert f"SHA-256 up to {checkpoint.CHECKSUM_MAX_BYTES / MiB:g} MiB" in b
    assert f"`save_total_limit` keeps the newest {RunConfig('stage3_offload').save_total_limit})" in b
    adam, bf16 = checkpoint.OPTIMIZER_BYTES, checkpoint.bytes_per_param(True, "bf16")
    assert f"master weights ({adam} bytes per parameter)" in b and f"optimizer's partitions are {adam} bytes" in b
    assert f"about {bf16} bytes per parameter" in b and f"About {bf16} bytes per parameter on a bf16" in b
    c = _flat(ROOT / "solutions" / "03c_models_that_do_not_fit.py")
    tokens = {
        json.loads(p.read_text())["max_tokens_per_micro_batch"] for p in REF.glob("h*/large-models*/**/run_config.json")
    }
    assert tokens == {large_models.LARGE["max_tokens_per_micro_batch"]}
    assert f"the reference runs' {tokens.pop():,} tokens" in c
    # preflight's refusal (fit.states_fit), by the one margin of every verdict
    assert f"alone passes {1 - fit.HEADROOM:.0%} of the GPU (the {fit.HEADROOM:.0%} headroom every verdict" in c
    assert (
        f"within {1 - fit.HEADROOM:.0%} of the GPU's memory: the other {fit.HEADROOM:.0%} (`fit.HEADROOM`, the "
        "one margin of every verdict here, the preflight's and the micro-batch sizing's too)"
    ) in c
    # exercise 4 holds the H200 reference against H100s like for like (large_models.on_h100s: PyTorch's peak
    # allocated and the estimate against 1 - HEADROOM of the card), not NVML's peak on the H200 against the card
    assert "large_models.on_h100s(" in c and "r['GPU peak MiB']" not in c and "fit.GPUS['H100 80GB'] -" not in c
    assert f"HF Trainer alone: {memory.zero_bytes_per_param(0, 1):g} bytes per parameter on the GPU" in c
    # DeepSpeed swaps a tensor to the drive from max(MIN_AIO_BYTES, aio block_size) bytes (swap_tensor/
    # partitioned_param_swapper.py, optimizer_utils.py): the block size is the one build_ds_config writes
    aio = build_ds_config("stage3_nvme", Settings(nvme_path="/nvme"))["aio"]["block_size"]
    swap_min = max(MIN_AIO_BYTES, aio) / MiB
    assert f"swaps tensors of {swap_min:g} MiB and more" in c and f"reached the {swap_min:g} MiB swap minimum" in c
    assert (
        f"about {memory.NVME_PARAM_BYTES + memory.NVME_OPTIMIZER_BYTES} bytes per parameter, "
        "`memory.estimate_nvme_swap`"
    ) in c
    # DeepSpeed's host estimate for ZeRO-3 + CPU offload, as the text splits it: bytes/param x buffer factor
    n = 10**9
    host = memory.estimate_model_states(n, 10**7, 3, offload_optimizer=True, offload_param=True)
    found = re.findall(r"(\d+) bytes per parameter,? x (?:its )?([\d.]+) buffer factor", c)
    assert len(found) == 2
    for per_param, factor in found:
        assert host["estimated_model_states_cpu_mib"] == round(n * int(per_param) * float(factor) / MiB, 1)
    machine = f"one {large_models.REFERENCE_GPU.split()[0]} with {large_models.REFERENCE_HOST_MIB / 1024:g} GiB of host memory"
    assert machine in c and f"{large_models.REFERENCE_HOST_MIB / 1024:g} GiB host" in " ".join(large_models.REFERENCES)
