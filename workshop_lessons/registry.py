"""The runs each notebook makes and the columns of its exercise table (`COURSE_RUNS`, `COLUMNS`), and where their GPU
reference runs live (`REFERENCE`, `REFERENCE_DIR`): data, importing nothing of the project. The notebooks and the
reference command (`python scripts/make_references.py runs OUT_DIR`, on a GPU) run exactly these runs, so each learner run has
a reference."""

from pathlib import Path

# The reference runs the notebooks show beside the learner's, shipped with the package (pyproject's package-data)
REFERENCE = Path(__file__).resolve().parent / "reference"
REFERENCE_DIR = REFERENCE / "h200" / "course"  # runs/NAME: one reference run each; repeat/NAME[-rK]: the same again
# slurm/common.sh as the notebooks show it, from a copy of the notebook in any folder (scripts/make_slurm.py copies it)
BATCH_SCRIPTS = Path(__file__).resolve().parent / "slurm"

QUARTER = "quarter"  # a quarter of the recipe's max_tokens_per_micro_batch (its --tiny value with the tiny model)
# run name -> (experiment, RunConfig settings beyond the notebook's common options)
COURSE_RUNS: dict[str, dict[str, tuple[str, dict]]] = {
    "01_baseline": {
        "baseline": ("baseline", {}),
        "baseline_classic": ("baseline", {"recipe": "classic"}),
        # the same tokens per optimizer step, in 4 micro-batches of a quarter the size
        "baseline_accum4": ("baseline", {"max_tokens_per_micro_batch": QUARTER, "gradient_accumulation_steps": 4}),
    },
    "02_zero_stages": {
        "baseline": ("baseline", {}),
        "stage1": ("stage1", {}),
        "stage2": ("stage2", {}),
        "stage3": ("stage3", {}),
        "baseline_ac": ("baseline", {"activation_checkpointing": True}),
        # ZeRO-3 runs without torch.compile (preflight.check_machine): the baseline the same way, to compare like
        # with like, and the compilation's own effect beside it
        "baseline_no_compile": ("baseline", {"torch_compile": False}),
        # one key of stage 2's ds_config.json changed (--ds-config): one gradient bucket instead of two
        "stage2_no_overlap": ("stage2", {"ds_config": ["zero_optimization.overlap_comm=false"]}),
        # reference only: the keys the own-key exercise suggests (`zero_stages.OWN_KEYS`), which a learner runs
        # as stage3_mine, so that a learner without a GPU sees their effect there too
        "stage3_no_contiguous": ("stage3", {"ds_config": ["zero_optimization.contiguous_gradients=false"]}),
        "stage3_no_overlap": ("stage3", {"ds_config": ["zero_optimization.overlap_comm=false"]}),
    },
    "03_cpu_offload": {
        "stage2": ("stage2", {}),
        "stage2_offload": ("stage2_offload", {}),
        "stage3": ("stage3", {}),
        "stage3_offload": ("stage3_offload", {}),
        # reference only: the key the own-key exercise's answer sets (`offload.OWN_KEYS`), made after stage2_offload
        # in one process, so that a learner without a GPU sees its effect there too
        "stage2_offload_pageable": (
            "stage2_offload",
            {"ds_config": ["zero_optimization.offload_optimizer.pin_memory=false"]},
        ),
    },
    # the ZenFlow appendix: ZeRO-2 offload with ZenFlow beside plain ZeRO-2 offload, the same settings and steps
}
# The notebooks and the reference stop after this many optimizer steps (the warm-up found in each run's log),
# the tiny CPU runs too (6 epochs of the tiny data). WORKSHOP_MAX_STEPS changes it (0: the recipe's epochs).
GPU_MAX_STEPS = 40
# The columns of each notebook's exercise table (results.json keys; titles and units from `results.COLUMNS`).
_SPEED = ["train_loss", "steady_train_tokens_per_second", "steady_step_time_s", "mfu", "hfu", "gpu_util_pct"]
COLUMNS = {
    "01_baseline": [
        *_SPEED,
        "tokens_per_step",
        "gpu_states_allocated_mib",
        "estimated_model_states_gpu_mib",
        "gpu_peak_allocated_mib",
        "gpu_peak_reserved_mib",
        "gpu_peak_mib",
        "host_peak_rss_mib",
    ],
    "02_zero_stages": [
        *_SPEED,
        "gpu_states_allocated_mib",
        "estimated_model_states_gpu_mib",
        "gpu_peak_allocated_mib",
        "gpu_peak_reserved_mib",
        "gpu_peak_mib",
        "host_peak_rss_mib",
    ],
    "03_cpu_offload": [
        *_SPEED,
        "gpu_states_allocated_mib",
        "estimated_model_states_gpu_mib",
        "estimated_model_states_cpu_mib",
        "gpu_peak_allocated_mib",
        "gpu_peak_mib",
        "host_states_rss_mib",
        "host_peak_rss_mib",
    ],
}
