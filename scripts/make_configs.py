"""Write configs/: the DeepSpeed JSON files shipped for users of their own Trainer scripts, one per experiment,
from `workshop_lib.ds_config.shipped_configs` (the configs `workshop run` builds, batch sizes left "auto" for the
Trainer). tests/test_ds_config.py checks they are up to date; change ds_config, never a written file.

    python scripts/make_configs.py            # write configs/ds_*.json
    python scripts/make_configs.py --check    # exit 1 if a file is missing or differs from what would be written
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # run as a script or loaded by a test
from generated import write_or_check  # noqa: E402

from workshop_lib.ds_config import shipped_configs  # noqa: E402

if __name__ == "__main__":
    files = {ROOT / "configs" / name: text for name, text in shipped_configs().items()}
    sys.exit(write_or_check(files, ROOT, "--check" in sys.argv, "python scripts/make_configs.py"))
