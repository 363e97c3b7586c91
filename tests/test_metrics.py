import pytest

from workshop_lib import metrics
from workshop_lib.model import count_params


def test_steady_state_leaves_out_the_warm_up_and_takes_medians():
    times = [5.0, 1.2, 0.5, 0.5, 0.6, 0.4, 0.5, 9.0, 0.5]  # a slow first step, one stall later
    tokens = [1000, 1000, 1000, 2000, 1200, 800, 1000, 1000, 1000]
    s = metrics.steady_state(times, tokens, global_batch_size=16)
    assert (s["warmup_steps"], s["steady_steps"]) == (3, 6)  # the first third
    assert s["steady_step_time_s"] == 0.5 and s["steady_train_samples_per_second"] == 32.0
    assert s["steady_train_tokens_per_second"] == 2000.0  # median of 4000, 2000, 2000, 2000, 111, 2000
    assert s["steady_window_tokens_per_second"] == 608.7  # 7,000 tokens / 11.5 s: the window counts the stall
    assert metrics.steady_state([3.0, 1.0], [10, 10], 4)["steady_step_time_s"] == 2.0  # too short to warm up
    assert metrics.steady_state([], [], 4)["steady_train_tokens_per_second"] is None


def test_flops_per_token_counts_attention_by_heads_times_head_dim():
    """Qwen3-0.6B: 28 layers, 16 heads x 128 = 2,048 wide attention (its hidden size is 1,024)."""
    n = count_params("Qwen/Qwen3-0.6B")["num_params"]
    f = metrics.flops_per_token(n, 28, 16 * 128, 256)
    assert f == pytest.approx(6 * n + 12 * 28 * 2048 * 256)
    assert metrics.mfu(50_000, f, 989e12, 1) == pytest.approx(50_000 * f / 989e12)
    assert metrics.mfu(None, f, 989e12, 1) is None and metrics.mfu(50_000, f, None, 1) is None
    head = 151_936 * 1024  # the tied LM head, vocabulary x hidden
    assert metrics.flops_per_token(n, 28, 2048, 256, head, 0.03) == pytest.approx(f - 6 * 0.97 * head)
