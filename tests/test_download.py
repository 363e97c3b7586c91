"""`workshop download` against a local stand-in for the hub (tests/hub_standin.py: a folder served over HTTP as
HF_ENDPOINT), then a run with HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 that loads the model, the tokenizer and
SQuAD from the caches it filled. The same run without the download fails: the test is not vacuous."""

import json
import os
import subprocess
import sys

import pytest
from hub_standin import StandInHub

from conftest import HANG_S
from workshop_lib.hub import OFFLINE

MODEL = "workshop-test/tiny-qwen3"  # a hub name, not a folder: it can only come from the hub or its cache
TRAIN, DEV = 40, 10  # SQuAD questions the stand-in serves (the bundled subset has 11,877 and 1,449)


def stand_in_repos(root):
    """A tiny Qwen3 (the --tiny dimensions, a tokenizer trained on the bundled SQuAD text) saved as a model
    repository, and the first SQuAD questions as a dataset repository laid out as the hub's: Parquet files per
    split, named in the README's YAML."""
    from transformers import AutoModelForCausalLM

    from workshop_lib.data import BUNDLED_FILES, read_squad_json
    from workshop_lib.model import TINY_VOCAB, local_tokenizer, tiny_config

    tok = local_tokenizer(TINY_VOCAB)
    cfg = tiny_config("Qwen/Qwen3-0.6B", len(tok))
    cfg.bos_token_id = cfg.eos_token_id = cfg.pad_token_id = tok.eos_token_id
    model_dir, squad_dir = root / "model", root / "squad"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    for split, n in (("train", TRAIN), ("validation", DEV)):
        ds = read_squad_json(BUNDLED_FILES[split]).select(range(n))
        ds.to_parquet(squad_dir / "plain_text" / f"{split}-00000-of-00001.parquet")
    (squad_dir / "README.md").write_text(
        "---\nconfigs:\n- config_name: plain_text\n  data_files:\n"
        "  - split: train\n    path: plain_text/train-*\n"
        "  - split: validation\n    path: plain_text/validation-*\n"
        "  default: true\n---\n# SQuAD (the first questions)\n"
    )
    return {("model", MODEL): model_dir, ("dataset", "rajpurkar/squad"): squad_dir}


def workshop(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "workshop_lib.cli", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


@pytest.mark.slow
def test_download_then_an_offline_run_works(tmp_path):
    online = {
        k: v
        for k, v in os.environ.items()
        if k not in {*OFFLINE, "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HF_DATASETS_CACHE"}
    }
    online["HF_HOME"] = str(tmp_path / "hf")  # an empty cache of the test's own
    offline = {**online, **OFFLINE}
    run = [
        "run",
        "baseline",
        "--model",
        MODEL,
        "--allow-cpu",
        "--max-steps",
        1,
        "--num-train-samples",
        8,
        "--num-eval-samples",
        2,
        "--save-strategy",
        "no",
        "--save-model",
        "false",
    ]

    with StandInHub(stand_in_repos(tmp_path / "hub")) as hub:
        online["HF_ENDPOINT"] = offline["HF_ENDPOINT"] = hub.url
        before = workshop(offline, *run, "--output-dir", tmp_path / "before")
        assert before.returncode == 2, before.stdout + before.stderr
        assert "is not in the Hugging Face cache" in before.stderr and "To fix:" in before.stderr
        assert not hub.requests  # offline means offline

        p = workshop(online, "download", "--model", MODEL)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"fetched {MODEL}: " in p.stdout and str(tmp_path / "hf" / "hub") in p.stdout
        assert f"fetched SQuAD ({TRAIN} train, {DEV} validation questions)" in p.stdout
        assert "ok: it loaded the model, the tokenizer and SQuAD from the caches" in p.stdout
        assert any(r.startswith(f"GET /{MODEL}/resolve/") and r.endswith("model.safetensors") for r in hub.requests)

    # the stand-in is gone: everything below comes from the caches
    after = workshop(offline, *run, "--output-dir", tmp_path / "after")
    assert after.returncode == 0, after.stdout + after.stderr
    r = json.loads((tmp_path / "after" / "results.json").read_text())
    assert r["model"] == MODEL and not r["tiny"] and not r["random_weights"] and r["global_steps"] == 1
    assert r["data_stats"]["train"]["source"] == "Hugging Face datasets cache (rajpurkar/squad)"
    assert "SQuAD train: 8 questions from Hugging Face datasets cache (rajpurkar/squad)" in after.stdout


def test_download_refuses_an_unreachable_hub():
    """No hub here: exit 2 and the fix, before any download."""
    env = {**{k: v for k, v in os.environ.items() if k not in OFFLINE}, "HF_ENDPOINT": "http://127.0.0.1:9"}
    p = workshop(env, "download", "--no-check")
    assert p.returncode == 2
    assert "is not reachable" in p.stderr and "To fix: run `workshop download` on a machine with internet" in p.stderr
