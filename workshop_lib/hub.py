"""The Hugging Face hub: whether it can be reached from here (`model` and `data` fall back to the cache and the
bundled files at once when it cannot). Hugging Face's own CLI fills the caches that runs read offline (README:
`hf download <model>`, and `datasets.load_dataset` for SQuAD)."""

import os
import socket
from urllib.parse import urlparse

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
