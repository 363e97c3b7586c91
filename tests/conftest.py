"""Shared fixtures. Everything runs for real on the CPU: the tiny model, real DeepSpeed, the bundled SQuAD."""

import functools
import os
import subprocess
import tempfile

import pytest

# No hub here: fall back to the bundled data and local tokenizers at once instead of probing the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# An empty datasets cache of the tests' own: on a machine where `datasets.load_dataset` cached SQuAD, offline runs
# would read it, and the tests expect the bundled subset
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="workshop-tests-datasets-")

# Before any test module imports DeepSpeed: `workshop_lib.env` pins its accelerator where there is no GPU, which
# DeepSpeed's own detection would announce with a warning in every worker
import workshop_lib.env  # noqa: E402, F401

# How long a test waits on a process or an event before calling it a hang: a guard, never a speed check, so far
# beyond what any load makes of a tiny run (a test must not fail by a clock a busy machine can reach)
HANG_S = 3600


# What `workshop` imports (transformers' Trainer, DeepSpeed, pandas: ~8 of a tiny run's ~14 s on a 2-core machine;
# DeepSpeed's Muon, which `deepspeed.initialize` imports, brings torch.compile's Inductor: ~2.5 s more), imported once
# per test worker by a server process that forks each command's process (multiprocessing's forkserver, `workshop`
# below). The server only imports: its children start as a fresh process would after those imports.
PRELOAD = [
    "workshop_child",
    "workshop_lib.cli",
    "workshop_lib.train",
    "workshop_lib.evaluation",
    "workshop_lib.results",
    "deepspeed.runtime.zero.muon.muon_optimizer",
]


@functools.cache
def _forkserver():
    """This worker's forkserver, started with `PRELOAD` imported: its `python -c` has none of pytest's folders on its
    path, so this one (workshop_child's) is given it through PYTHONPATH (its children take the caller's back)."""
    import multiprocessing.forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.path.dirname(__file__), os.environ.get("PYTHONPATH")])))
        multiprocessing.forkserver.ensure_running()
    return ctx


class Workshop:
    """`Workshop(*ARGS)` starts the `workshop` command line (`workshop_lib.cli.main`) in a process of its own, forked
    from a server that imported `PRELOAD`, in this process's environment updated by `env` (a variable given None is
    unset) and folder `cwd`; `fault` = (WHEN, SIGNAL) as tests/faults.py takes them. As much of a `subprocess.Popen`
    as the tests use: pid, poll(), send_signal(), kill(), communicate() -> (stdout, stderr) text, returncode (-N where
    signal N ended it)."""

    def __init__(self, *args, cwd=None, env=None, fault=None):
        import workshop_child

        ctx = _forkserver()
        self.args, self.dir = ["workshop", *map(str, args)], tempfile.TemporaryDirectory(prefix="workshop-cli-")
        self.files = [os.path.join(self.dir.name, f) for f in ("stdout", "stderr")]
        environ = {k: v for k, v in (os.environ | (env or {})).items() if v is not None}  # None: unset
        cwd = os.fspath(cwd or os.getcwd())
        self.process = ctx.Process(
            target=workshop_child.main_in_child, args=(self.args[1:], cwd, environ, *self.files, fault)
        )
        self.process.start()
        self.pid = self.process.pid

    @property
    def returncode(self):
        return self.process.exitcode

    def poll(self):
        return self.returncode

    def send_signal(self, sig):
        os.kill(self.pid, sig)

    def kill(self):
        self.process.kill()

    def wait(self, timeout=HANG_S):
        self.process.join(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout=HANG_S):
        """Wait for the end (killed after `timeout` s: TimeoutExpired); its (stdout, stderr) text."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        out = tuple(open(f, errors="replace").read() for f in self.files)
        self.dir.cleanup()
        return out


def workshop(*args, cwd=None, env=None, check=True, fault=None):
    """Run `workshop ARGS` (`Workshop`) to its end; return a CompletedProcess with its stdout and stderr text.

    Raises:
        AssertionError: with `check`, a non-zero exit, its output in the message.
        subprocess.TimeoutExpired: still running after `HANG_S` (killed)."""
    w = Workshop(*args, cwd=cwd, env=env, fault=fault)
    out, err = w.communicate()
    p = subprocess.CompletedProcess(w.args, w.returncode, out, err)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(w.args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


@pytest.fixture(autouse=True)
def _no_inherited_world(monkeypatch):
    """A test starts without a world's variables (`teardown.DIST_VARS`), and leaves none: a `workshop run` child
    inheriting RANK, WORLD_SIZE and MASTER_PORT took itself for a launched rank and failed on that port
    (EADDRINUSE, seen in CI). A run removes those it set when it ends (`teardown.restored_world`); a test that
    calls `env.ensure_distributed_env` itself does not. monkeypatch removes them again after the test."""
    from workshop_lib.teardown import DIST_VARS

    for v in DIST_VARS:
        monkeypatch.delenv(v, raising=False)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(items):
    """A test that reads the session's tiny runs is end to end: marked slow. scripts/test.sh runs the suite on
    two workers (pytest-xdist, `-n 2 --dist loadgroup`): tests that share something run in one worker, one after
    the other. The SLURM cluster's two one-CPU nodes (test_slurm.py and
    notebook 04, which submits a job), the session's tiny runs of every experiment (made once, in the worker
    that holds their readers), and each notebook's course/ and solutions/ versions (both write runs/<notebook>)."""
    for item in items:
        if "tiny_runs" in getattr(item, "fixturenames", ()):  # end to end: DeepSpeed runs of the tiny model
            item.add_marker(pytest.mark.slow)
        if item.path.name == "test_slurm.py" or item.path.stem == "04_multi_gpu":
            group = "slurm"
        elif "tiny_runs" in getattr(item, "fixturenames", ()):
            group = "tiny_runs"
        elif item.path.suffix == ".ipynb":
            group = f"notebook-{item.path.stem}"
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """On an xdist worker with `--dist loadgroup`, refuse to run when the groups did not reach the node ids: every
    worker would then make its own tiny runs and share the SLURM cluster's nodes with the other."""
    if getattr(session.config, "workerinput", None) is None or not session.config.getvalue("loadgroup"):
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (e.g. {lost[0]}): pytest "
            f"{pytest.__version__} keeps node ids that xdist cannot extend.\n"
            "To fix: pip install 'pytest<9.2' (pyproject.toml's test extra)."
        )


@pytest.fixture
def run_cli():
    return workshop


def unavailable_ops(experiment: str) -> str | None:
    """Why this machine cannot run `experiment` (a DeepSpeed op it needs cannot be built: no compiler for cpu_adam),
    as `workshop run` would say it with its fix; None when it can."""
    from workshop_lib import env
    from workshop_lib.ds_config import EXPERIMENTS
    from workshop_lib.errors import WorkshopError

    exp = EXPERIMENTS[experiment]
    if not exp.deepspeed:
        return None
    try:
        env.check_deepspeed_ops(env.deepspeed_ops(exp.offload_optimizer))
    except WorkshopError as e:
        return str(e).replace("\n", " ")
    return None


def skip_unless_runnable(experiment: str) -> None:
    """Skip the calling test, with the reason and the fix in pytest's summary, when `experiment` cannot run here."""
    why = unavailable_ops(experiment)
    if why:
        pytest.skip(f"{experiment} cannot run on this machine: {why}")


class TinyRuns:
    """The session's tiny runs: `tiny_runs / "stage2"` is ROOT/stage2, made by `workshop run stage2 --tiny` the
    first time a test asks for it (stage2 also answers 4 dev questions before and after training). An experiment
    this machine cannot run skips the tests that read it, and a run that fails fails those tests alone."""

    def __init__(self, root):
        self.root, self.errors = root, {}

    def __truediv__(self, experiment: str):
        d = self.root / experiment
        if experiment in self.errors:
            raise self.errors[experiment]
        if not (d / "results.json").exists():
            skip_unless_runnable(experiment)
            try:
                workshop(
                    "run",
                    experiment,
                    "--tiny",
                    "--output-dir",
                    d,
                    *(["--score-questions", 4] if experiment == "stage2" else []),
                )
            except Exception as e:  # a failure or a time-out: made once, reported by every test that reads it
                self.errors[experiment] = e
                raise
        return d

    def available(self) -> list[str]:
        """The experiments this machine can run, each run (for tests over all of them)."""
        from workshop_lib.ds_config import EXPERIMENTS

        names = [e for e in EXPERIMENTS if unavailable_ops(e) is None]
        for e in names:
            self / e
        return names


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """`TinyRuns`: every experiment of `ds_config.EXPERIMENTS` through `workshop run --tiny`, each made once, on
    first use; shared by every test that reads real runs."""
    return TinyRuns(tmp_path_factory.mktemp("runs"))
