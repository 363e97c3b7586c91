"""The benchmark itself, on the CPU with the tiny model: its rows, the peers' (HF Trainer, TRL), the plain PyTorch
ceiling, the table and plot; and nothing written where it cannot run."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from workshop_lib import metrics

ROOT = Path(__file__).resolve().parent.parent.parent
# a hang guard, never a speed check (tests/conftest.py's HANG_S): a busy machine, or one building DeepSpeed's ops for
# the first time, must make these slower, never red
HANG_S = 3600


def bench(*args):
    return subprocess.run(
        [sys.executable, "-m", "lab.bench", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_S,
        env=os.environ | {"HF_HUB_OFFLINE": "1"},
    )


def steady_tokens_per_s(run_dir):
    """The steady tokens/s of a row's own step log (train_log.csv), by the bench's one definition."""
    log = pd.read_csv(run_dir / "train_log.csv").dropna(subset=["step_time_s"])
    return metrics.steady_state(
        log["step_time_s"].tolist(), log["tokens"].astype(int).tolist(), 1, log["compiles"].astype(int).tolist()
    )["steady_train_tokens_per_second"]


@pytest.mark.slow
def test_bench_runs_rows_peers_and_the_plain_pytorch_ceiling(tmp_path):
    """A workshop row, the same on packed rows, every peer row (TRL's skipped with its reason where TRL is not
    installed, FSDP2's on a CPU) and both ceilings in one call, real DeepSpeed on the CPU; each figure is its own
    train_log.csv's steady state, each row's configuration stated. The Trainer rows see the same batches: the same
    real tokens a step and the same losses with and without the attention mask and flattened (right padding under a
    causal mask and position_ids per question change no real token's result)."""
    from lab.bench import (
        CEILING,
        CEILING_PACKED,
        FSDP2_PEER,
        HF_COMPILE,
        HF_FLAT,
        HF_PEER,
        PACKED,
        PEERS,
        run_dir_name,
    )

    p = bench(
        "--tiny", "--max-steps", "3", "--out", tmp_path, "--only", "default ZeRO-2", PACKED, CEILING_PACKED, *PEERS
    )
    assert p.returncode == 0, p.stderr[-3000:]
    table = pd.read_csv(tmp_path / "bench.csv").set_index("row")
    # the ceilings first: the peers' Liger-Kernel patches the model classes of every later row
    assert list(table.index) == [CEILING, CEILING_PACKED, "default ZeRO-2", PACKED, *PEERS]
    assert table["configuration"].notna().all() and table["configuration"].is_unique, table["configuration"]
    trl = importlib.util.find_spec("trl") is not None  # the bench runs in this environment
    trl_rows = [r for r in PEERS if "TRL" in r]
    gpu_only = {FSDP2_PEER: "accelerate shards with FSDP on GPUs only", HF_COMPILE: "the torch_compile row asks"}
    ran = ["default ZeRO-2", PACKED, *(r for r in PEERS if r not in gpu_only and (trl or r not in trl_rows))]
    assert (table.loc[[*ran, CEILING, CEILING_PACKED], "steady tokens/s"] > 0).all(), table.to_string()
    for row, reason in gpu_only.items():
        assert table.loc[row, "error"].startswith(f"WorkshopError: {reason}"), row
    packed = pd.read_csv(tmp_path / "runs" / run_dir_name(PACKED) / "micro_batches.csv")
    assert set(zip(packed["sequences"], packed["length"])) == {(1, 6144)}  # one row of --tiny's budget, every step
    for row in ran:  # the workshop's row (results.json) and the peers' (their logs) read the same columns
        got = steady_tokens_per_s(tmp_path / "runs" / run_dir_name(row))
        assert table.loc[row, "steady tokens/s"] == pytest.approx(got, rel=0.01), row
    logs = {r: pd.read_csv(tmp_path / "runs" / run_dir_name(r) / "train_log.csv") for r in PEERS if r in ran}
    for row in (HF_FLAT, "A/B: HF Trainer + ZeRO-2 + Liger, attention mask"):
        assert logs[row]["tokens"].tolist() == logs[HF_PEER]["tokens"].tolist(), row
        assert logs[row]["loss"].tolist() == pytest.approx(logs[HF_PEER]["loss"].tolist(), rel=1e-4), row
    md = (tmp_path / "bench.md").read_text()
    assert f"- default ZeRO-2 / {HF_PEER} (steady tokens/s): " in md and "plain PyTorch" in md
    assert (f"- default ZeRO-2 / {trl_rows[0]} (steady tokens/s): " in md) == trl
    if not trl:
        assert (
            table.loc[trl_rows, "error"]
            == (
                "WorkshopError: TRL is not installed (No module named 'trl'): its "
                "row is skipped. To fix: pip install trl (1.16.0 measured) to run it."
            )
        ).all()
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_without_a_gpu_refuses_before_writing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the benchmark runs")
    p = bench("--max-steps", "3", "--out", tmp_path / "out")
    assert p.returncode == 2 and "No CUDA GPU is visible" in p.stderr and "To fix:" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_the_chunked_loss_row_trains_with_deepspeeds_loss_and_the_same_objective():
    """`CHUNKED`'s callback makes the model's loss DeepSpeed's chunked cross-entropy (its torch backend on the CPU),
    which gives the stock loss and gradients on a batch with ignored positions."""
    import torch
    from deepspeed.runtime.chunked_cross_entropy import ChunkedCausalLMLoss
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from lab.bench import ChunkedLoss

    torch.manual_seed(0)
    net = Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=96,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
        )
    )
    ids = torch.randint(0, 96, (2, 12))
    labels = ids.clone()
    labels[:, :7] = -100  # the prompt: no target
    stock = net(input_ids=ids, labels=labels).loss
    stock.backward()
    grad = net.lm_head.weight.grad.clone()
    net.zero_grad()
    ChunkedLoss().on_train_begin(None, None, None, model=net)
    assert isinstance(net.loss_function, ChunkedCausalLMLoss)
    chunked = net(input_ids=ids, labels=labels).loss
    chunked.backward()
    assert chunked.item() == pytest.approx(stock.item(), rel=1e-5)
    torch.testing.assert_close(net.lm_head.weight.grad, grad, rtol=1e-4, atol=1e-6)


BUCKET_HOOKS_CHECK = """
import os, sys, torch, deepspeed
from transformers import Qwen3Config, Qwen3ForCausalLM
from lab.bench import bucket_hooks
deepspeed.init_distributed("gloo")
rank = int(os.environ["RANK"])
ds = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW",
      "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
      "reduce_bucket_size": 5000}}

def train(bucketed):
    torch.manual_seed(0)
    net = Qwen3ForCausalLM(Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=16))
    eng, *_ = deepspeed.initialize(model=net, config=ds, model_parameters=net.parameters())
    buckets = bucket_hooks(eng.optimizer, elements=3000) if bucketed else 0
    torch.manual_seed(1 + rank)
    losses = []
    for _ in range(4):  # 2 optimizer steps of 2 micro-batches
        ids = torch.randint(0, 96, (2, 12))
        loss = eng(input_ids=ids, labels=ids).loss
        eng.backward(loss)
        eng.step()
        losses.append(loss.item())
    return losses, [t.clone() for t in eng.optimizer.single_partition_of_fp32_groups], buckets

(l0, p0, _), (l1, p1, buckets) = train(False), train(True)
assert buckets > 2 and l0 == l1 and all(torch.equal(a, b) for a, b in zip(p0, p1)), (buckets, l0, l1)
print(f"rank {rank}: identical over {buckets} buckets, losses {l0}")
"""


def test_one_gradient_hook_per_bucket_gives_deepspeeds_gradients(tmp_path):
    """`bucket_hooks` (the row `BUCKETED`): ZeRO-2 on 2 CPU ranks (gloo), DeepSpeed's reduction buckets of 5,000
    elements and hook buckets of 3,000, 2 micro-batches a step, 2 steps: the same losses and the same fp32
    partitions, bit for bit, as with DeepSpeed's hook per parameter."""
    script = tmp_path / "check.py"
    script.write_text(BUCKET_HOOKS_CHECK)
    env = os.environ | {"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
        cwd=tmp_path,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert all(f"rank {r}: identical over" in p.stdout for r in (0, 1)), p.stdout[-2000:]
