"""workshop_lib: the small library behind the DeepSpeed fine-tuning workshop.

One module per concept: `data` (SQuAD prompts), `model` (hub, random-weight and tiny models), `ds_config`
(DeepSpeed configs), `memory` (sampler and estimates), `train` (`run_experiment`), `results` (tables, plots),
`cli` (`workshop run`, `workshop report`).
"""

from .errors import WorkshopError

__all__ = ["WorkshopError"]
