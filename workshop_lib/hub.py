"""Whether the Hugging Face hub can be reached from here: models (`model`) and SQuAD (`data`) fall back to the
cache and the bundled files at once when it cannot."""

import os
import socket


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when huggingface.co answers on port 443 within `timeout_s` and no *_OFFLINE variable is set.

    A quick probe, so that an offline node falls back at once instead of retrying for half a minute.
    """
    if any(os.environ.get(v, "0") not in ("", "0") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False
