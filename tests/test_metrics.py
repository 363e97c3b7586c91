import pytest

from workshop_lib import metrics
from workshop_lib.model import count_params


def test_steady_state_finds_the_warm_up_in_the_log_and_counts_every_steady_token_over_every_steady_second():
    times = [5.0, 1.2, 0.5, 0.5, 0.6, 0.4, 0.5, 9.0, 0.5, 0.5]  # set-up, a compile at step 8
    tokens = [1000, 1000, 1000, 2000, 1200, 800, 1000, 1000, 1000, 1000]
    s = metrics.steady_state(times, tokens, global_batch_size=16)
    # the second half's median: 0.5 ms per token; step 2 (1.2 ms) is not settled, step 3 is; step 8, at 9 ms per
    # token (over COMPILING x), is taken for a compilation: 7 steady steps
    assert (s["warmup_steps"], s["steady_steps"]) == (2, 7)
    assert s["steady_train_tokens_per_second"] == round(8000 / 3.5, 1)  # all tokens over all time
    assert s["steady_step_time_s"] == 0.5 and s["steady_train_samples_per_second"] == 32.0
    counted = metrics.steady_state(times, tokens, 16, compiles=[1, 1, 0, 0, 0, 0, 0, 0, 0, 0])  # step 8 did not compile
    assert counted["steady_steps"] == 8 and counted["steady_train_tokens_per_second"] == round(9000 / 12.5, 1)
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
