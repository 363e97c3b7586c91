"""The Hugging Face hub: whether it can be reached from here (`model` and `data` fall back to the cache and the
bundled files at once when it cannot), and `workshop download`, which fills the caches that runs read offline."""

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from .errors import WorkshopError
from .units import MiB

MODEL_FILES = ["*.json", "*.txt", "*.model", "*.safetensors"]  # config, tokenizer, weights; no ONNX, GGUF, Flax copies
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
SQUAD = "rajpurkar/squad"  # where load_dataset("squad") redirects; the short name is no valid hf:// path


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when the hub (HF_ENDPOINT, else huggingface.co) answers within `timeout_s` and no *_OFFLINE variable
    is set. A quick probe, so that an offline node falls back at once instead of retrying for half a minute."""
    if any(os.environ.get(v, "0") not in ("", "0") for v in OFFLINE):
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout_s).close()
        return True
    except OSError:
        return False


def download(models: list[str]) -> list[tuple[str, str, float]]:
    """Fetch each of `models` (config, tokenizer, weights: `huggingface_hub.snapshot_download`) into the hub cache and
    SQuAD's train and validation splits (`datasets.load_dataset(SQUAD)`) into the datasets cache, both under HF_HOME:
    where `model.load_model_and_tokenizer` and `data.load_squad` look offline. The libraries show their progress.

    Returns [(what, where, MiB)]: one row per model, then SQuAD's.

    Raises:
        WorkshopError: the hub is not reachable (or HF_HUB_OFFLINE=1), or a model or SQuAD cannot be fetched.
    """
    if not hub_reachable():
        raise WorkshopError(
            f"The hub ({os.environ.get('HF_ENDPOINT') or 'huggingface.co'}) is not reachable from "
            "here, or HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set.",
            "run `workshop download` on a machine with internet (a login node) with the HF_HOME the "
            "runs use, and unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE for it.",
        )
    import datasets
    import httpx2
    from huggingface_hub import constants, set_client_factory, snapshot_download
    from huggingface_hub.utils import _http

    def bounded(request):  # huggingface_hub asks some calls (repo_info) to wait without bound: a silent hub hangs
        request.extensions["timeout"] = httpx2.Timeout(constants.HF_HUB_DOWNLOAD_TIMEOUT).as_dict()  # 10 s, or its env

    def client():
        c = _http.default_client_factory()
        c.event_hooks = c.event_hooks | {"request": [*c.event_hooks["request"], bounded]}
        return c

    set_client_factory(client)
    rows = []
    try:
        for name in models:
            path = snapshot_download(name, allow_patterns=MODEL_FILES)
            if not any(Path(path).glob("*.safetensors")):  # an older repository ships PyTorch pickles only
                path = snapshot_download(name, allow_patterns=[*MODEL_FILES, "pytorch_model*.bin"])
            rows.append((name, path, sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / MiB))
        name = "SQuAD"
        squad = [datasets.load_dataset(SQUAD, split=s) for s in ("train", "validation")]
    # huggingface_hub's HTTP errors are OSErrors (no such repository, gated, network); a connection closed or silent
    except (OSError, ValueError, httpx2.HTTPError) as e:
        raise WorkshopError(
            f"{name} could not be fetched: {type(e).__name__}: {str(e).splitlines()[0]}",
            "check the name (org/name on the hub) and the network (HF_ENDPOINT; each request waits "
            f"{constants.HF_HUB_DOWNLOAD_TIMEOUT} s, HF_HUB_DOWNLOAD_TIMEOUT); a gated model needs `hf auth login` and "
            "its terms accepted on its page.",
        ) from e
    size = sum(os.path.getsize(f["filename"]) for d in squad for f in d.cache_files) / MiB
    return [
        *rows,
        (
            f"SQuAD ({len(squad[0]):,} train, {len(squad[1]):,} validation questions)",
            datasets.config.HF_DATASETS_CACHE,
            size,
        ),
    ]


def check_offline_run(model: str, recipe: str) -> None:
    """Start `workshop run baseline` of `model` in a child process as a compute node without internet would (with
    `OFFLINE`, as slurm/common.sh sets it): one step of 4 questions, on the CPU too, into a temporary folder.
    Raises WorkshopError: the run failed; the message holds the last lines it printed."""
    import subprocess
    import sys
    import tempfile

    args = (
        "run baseline --num-train-samples 4 --num-eval-samples 2 --max-steps 1 --gradient-accumulation-steps 1 "
        "--save-strategy no --save-model false --allow-cpu"
    ).split()
    with tempfile.TemporaryDirectory(prefix="workshop-download-") as tmp:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "workshop_lib.cli",
                *args,
                "--recipe",
                recipe,
                "--model",
                model,
                "--output-dir",
                f"{tmp}/run",
            ],
            env={**os.environ, **OFFLINE},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    if p.returncode:
        raise WorkshopError(
            f"An offline run of {model} (recipe {recipe}) failed, exit status {p.returncode}; its last "
            "lines:\n" + "\n".join(p.stdout.strip().splitlines()[-12:]) + "\n",
            "see those lines; the files were fetched into the caches listed above.",
        )
