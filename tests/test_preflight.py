"""workshop_lib.preflight's "will it fit?" is fit's: the model states the preflight refuses by are `fit.estimate`'s,
and it refuses exactly the runs whose states alone pass 1 - `fit.HEADROOM` of the GPU, the share fit's verdict
holds the whole estimate to, never one for its activations (notebook 03c starts such a run on purpose). Fast: parameter counts on the meta device, no GPU."""

import pytest

from workshop_lib import fit, preflight
from workshop_lib.config import RunConfig
from workshop_lib.ds_config import EXPERIMENTS
from workshop_lib.errors import WorkshopError


def _refused(cfg, exp, counts, gpu_mib) -> str | None:
    try:
        preflight.check_states_fit(cfg, exp, counts, 1, gpu_mib)
    except WorkshopError as e:
        return str(e)
    return None


@pytest.mark.parametrize("model", fit.MODELS)
def test_the_preflight_refuses_exactly_what_fits_states_rule_rules_out(model):
    counts, activations_only = fit.model_shape(model), 0
    for name, exp in EXPERIMENTS.items():
        for gpu, gpu_mib in fit.GPUS.items():
            est = fit.estimate(model, **exp.fit_setup, gpu=gpu)
            states = preflight.model_states(counts, exp, 1)
            assert states["estimated_model_states_gpu_mib"] == est["model_states_gpu_mib"], (name, gpu)
            refused = _refused(RunConfig(name, model=model), exp, counts, gpu_mib)
            assert (refused is not None) == (est["model_states_gpu_mib"] > (1 - fit.HEADROOM) * gpu_mib), (name, gpu)
            assert est["usable_gpu_mib"] == round(
                (1 - fit.HEADROOM) * gpu_mib, 1
            )  # one margin: fit's and the preflight's
            if est["fits"]:  # a run that fits by the estimate passes the preflight
                assert not refused, (name, gpu)
            if refused:  # fit's verdict says no too, and the message gives both figures and the headroom
                assert not est["fits"] and f"({fit.HEADROOM:.0%} kept as headroom)" in refused
                assert f"{est['model_states_gpu_mib']:,.0f} MiB per GPU" in refused and f"{gpu_mib:,.0f} MiB" in refused
            activations_only += not refused and not est["fits"]
    # runs the preflight lets start though fit's whole estimate (states + activations + logits) does not fit
    assert activations_only > 0


def test_check_resources_refuses_on_a_gpu_and_never_for_the_tiny_model(monkeypatch):
    """Qwen3-8B under the HF Trainer alone (16 bytes/param) on an H100: refused before the model is built; under
    ZeRO-3 + CPU offload it passes; the tiny model is never checked."""
    monkeypatch.setattr(preflight.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(preflight, "gpu_memory_mib", lambda local_rank: fit.GPUS["H100 80GB"])
    model = "Qwen/Qwen3-8B"
    with pytest.raises(WorkshopError, match=r"for its model states alone under baseline .* more than 85% of this"):
        preflight.check_resources(RunConfig("baseline", model=model), EXPERIMENTS["baseline"], 1, 0)
    preflight.check_resources(RunConfig("stage3_offload", model=model), EXPERIMENTS["stage3_offload"], 1, 0)
    preflight.check_resources(RunConfig("baseline", model=model, tiny=True), EXPERIMENTS["baseline"], 1, 0)
