"""workshop_lib: the small library behind the DeepSpeed fine-tuning workshop.

One module per concept: `config` (RunConfig, experiments, recipes), `data` (SQuAD prompts, collator),
`model` (hub, random-weight and tiny models), `ds_config` (DeepSpeed configs), `env` (the machine, ranks,
DeepSpeed ops), `memory` (sampler and estimates), `fit` (will a run fit a GPU? its explorer), `metrics` (MFU),
`train` (`run_experiment`), `comms` (DeepSpeed's comms logger -> comms.json), `rundir` (output directories,
signals), `results` (RunResults, tables, plots), `launch` (torchrun, SLURM), `cli` (`workshop run`, `workshop report`).
"""

from .errors import WorkshopError

__all__ = ["WorkshopError"]
