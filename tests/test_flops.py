import pytest
import torch

from gum_utils.core import flops
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train


def test_a_stack_of_linear_layers_counts_the_flops_worked_out_by_hand():
    n, a, b, c = 7, 10, 20, 5
    model = torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, c))
    x = torch.randn(n, a)  # needs no gradient: the first layer's input gradient is not computed
    forward = 2 * n * (a * b + b * c)
    backward = 2 * n * a * b + 2 * (2 * n * b * c)  # weight grads of both, input grad of the second
    assert flops.count_flops(lambda: model(x)) == forward
    assert flops.count_flops(lambda: model(x).sum().backward()) == forward + backward


def test_attention_on_the_cpu_is_counted_as_two_matmuls_forward_and_four_backward():
    batch, heads, queries, keys, depth = 2, 4, 64, 48, 32
    q = torch.randn(batch, heads, queries, depth, requires_grad=True)
    kv = torch.randn(batch, heads, keys, depth, requires_grad=True)
    attend = lambda: torch.nn.functional.scaled_dot_product_attention(q, kv, kv)  # noqa: E731
    forward = 2 * batch * heads * queries * keys * 2 * depth
    assert flops.count_flops(attend) == forward
    assert flops.count_flops(lambda: attend().sum().backward()) == 3 * forward


def test_mfu_is_achieved_flops_per_second_over_the_peak():
    # 100 TFLOP in half a second on a 312 TFLOP/s device: 200 / 312.
    assert flops.mfu(100e12, 0.5, 312.0) == pytest.approx(200 / 312)
    assert flops.mfu(100e12, 0.5, None) is None and flops.mfu(None, 0.5, 312.0) is None


@pytest.mark.parametrize("name, precision, peak", [
    ("NVIDIA A100-SXM4-80GB", "bfloat16", 312.0), ("NVIDIA A10G", "bfloat16", 125.0),
    ("NVIDIA H100 PCIe", "float32", 51.2), ("NVIDIA H100 80GB HBM3", "float32", 66.9),
    ("NVIDIA H200", "tf32", 494.7), ("x86_64", "float32", None), (None, "bfloat16", None),
])
def test_the_peak_is_looked_up_by_device_name_and_precision(name, precision, peak):
    assert flops.peak_tflops(name, precision) == peak


def test_fp32_matmuls_count_against_the_tf32_peak_once_tf32_is_allowed():
    before = torch.get_float32_matmul_precision()
    try:
        assert flops.matmul_precision("float32") == "float32"
        torch.set_float32_matmul_precision("high")
        assert flops.matmul_precision("float32") == "tf32"
        assert flops.matmul_precision("bfloat16") == "bfloat16"
    finally:
        torch.set_float32_matmul_precision(before)


def _run(strategy, **overrides):
    return train(RunConfig(arch="llama", strategy=strategy, steps=2, batch_size=8, eval_samples=8,
                           sample_interval_s=0.05, **overrides))


def test_a_run_reports_model_flops_the_same_for_every_strategy_and_no_mfu_on_a_cpu():
    standard = _run("standard").summary
    assert standard["flops_per_step"] > 0 and standard["model_tflops_per_s"] > 0
    assert standard["mfu"] is None and standard["peak_tflops"] is None and "FlopCounterMode" in standard["flop_method"]
    # Model FLOPs leave out checkpointing's recomputation; 2 micro-batches of 4 are one batch of 8.
    assert _run("checkpointing").summary["flops_per_step"] == standard["flops_per_step"]
    assert _run("accumulation", micro_batch_size=4).summary["flops_per_step"] == standard["flops_per_step"]


def test_bfloat16_autocast_trains_and_differs_from_float32():
    config = dict(arch="vit", steps=6, batch_size=8, eval_samples=16, fixed_batch=True, sample_interval_s=0.05)
    half = train(RunConfig(dtype="bfloat16", **config))
    full = train(RunConfig(**config))
    losses = [r["loss"] for r in half.records]
    assert half.status == "ok" and losses[-1] < losses[0]
    assert losses != [r["loss"] for r in full.records]
    assert half.summary["matmul_precision"] == "bfloat16"
    with pytest.raises(ValueError, match="valid choices: float32, bfloat16"):
        RunConfig(arch="vit", dtype="float16")
