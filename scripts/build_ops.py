"""Compile the named DeepSpeed ops now, each announced and timed (`workshop_lib.env.build_deepspeed_ops`), so that no
run or notebook compiles them later (scripts/setup.sh runs it). One that cannot be built here is named with its fix,
and set-up goes on (exit status 0): the experiments that do not need it still run.

    python scripts/build_ops.py CPUAdamBuilder FusedAdamBuilder
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's workshop_lib
from workshop_lib.env import build_deepspeed_ops, check_deepspeed_ops, sanitize_cuda_arch_list  # noqa: E402
from workshop_lib.errors import WorkshopError  # noqa: E402

if __name__ == "__main__":
    sanitize_cuda_arch_list()
    for name in sys.argv[1:]:
        try:
            check_deepspeed_ops([name])
            build_deepspeed_ops([name])
        except (WorkshopError, ImportError, RuntimeError, OSError) as e:
            print(f"\nDeepSpeed's {name} was not built: {e}".replace("\n", "\n  "))
