"""workshop_lib: the small library behind the DeepSpeed fine-tuning workshop.

One module per concept: `config` (RunConfig, experiments, recipes), `data` (SQuAD prompts, collator), `model` (hub,
random-weight and tiny models), `ds_config` (DeepSpeed configs), `env` (the machine, ranks, DeepSpeed ops),
`memory` (sampler and estimates), `fit` (will a run fit a GPU? its explorer), `metrics` (MFU), `preflight` (what a
run checks before it trains: the machine, a resume, will the model states fit), `train` (`run_experiment`, its
stages and their `Run`), `record` (a finished run's results.json), `callbacks` (the Trainer callbacks of every run:
step log, stop, phases), `teardown` (the clean-up that lets a kernel run several experiments),
`comms` (DeepSpeed's comms logger -> comms.json), `rundir` (output directories,
signals), `checkpoint` (resume, export), `evaluation`
(the fine-tuned model: generation, EM/F1), `results` (RunResults, tables, plots), `launch` (torchrun,
SLURM), `cli` (`workshop run`, `workshop report`), `errors` (`WorkshopError`), `units` (MiB), `gpus` (the GPU
table: memory and peak FLOP/s), `variables` (the WORKSHOP_* environment variables, read in one place), `hub` (is the Hugging Face hub
reachable?). The course's lessons (`workshop_lessons`) and the lab (`lab/`) stand on this
package; it imports neither. Its layers, low to high, without circles: tests/test_layers.py."""

from .errors import WorkshopError

__all__ = ["WorkshopError"]
