"""Model FLOPs of a training step, and model FLOPs utilization (MFU) against the device's peak.

Counting method: PyTorch's `torch.utils.flop_counter.FlopCounterMode` over one forward and
backward pass of the step's micro-batches, before checkpointing is switched on, so the
recomputation checkpointing adds is not counted (the usual definition of *model* FLOPs).
It counts matrix multiplications, attention (scaled dot-product) and convolutions at
2 FLOPs per multiply-add; element-wise work (norms, activations, softmax outside fused
attention) and the optimizer's update are not counted, so MFU is slightly understated.

Peaks are the dense (not 2:4 sparse) figures from NVIDIA's datasheets, in TFLOP/s, for the
precision the matrix multiplications run in: float32 on CUDA cores unless TF32 is allowed
(`torch.set_float32_matmul_precision`), or bfloat16 on the tensor cores under autocast.
"""

import torch
from torch.utils.flop_counter import FlopCounterMode

# Device name fragment (as torch.cuda.get_device_name reports it) -> TFLOP/s by precision.
# The first fragment found wins: "H100 PCIe" before "H100", "A100" before "A10".
PEAK_TFLOPS = {
    "H200": {"float32": 67.0, "tf32": 494.7, "bfloat16": 989.4},
    "H100 PCIe": {"float32": 51.2, "tf32": 378.0, "bfloat16": 756.0},
    "H100": {"float32": 66.9, "tf32": 494.7, "bfloat16": 989.4},
    "A100": {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0},
    "L40S": {"float32": 91.6, "tf32": 183.0, "bfloat16": 362.1},
    "L4": {"float32": 30.3, "tf32": 60.0, "bfloat16": 121.0},
    "A10": {"float32": 31.2, "tf32": 62.5, "bfloat16": 125.0},
}
METHOD = ("torch.utils.flop_counter.FlopCounterMode, one forward+backward of the step's micro-batches "
          "without checkpoint recomputation (nor a line search's extra evaluations, so CGD's MFU is a lower "
          "bound); matmuls, attention and convolutions only")


def _attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """Two matmuls, Q K^T and P V, over the query's heads (grouped KV heads are broadcast)."""
    batch, heads, queries, depth = query
    keys, value_depth = key[-2], value[-1]
    return 2 * batch * heads * queries * keys * (depth + value_depth)


def _attention_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    """Four matmuls (dV, dP, dQ, dK): twice the forward."""
    return 2 * _attention_flops(query, key, value)


# CPU attention kernels PyTorch's counter does not know (it counts the CUDA ones itself).
_CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _attention_backward_flops,
}


def count_flops(function) -> int:
    """FLOPs of the tensor work `function()` does (forward and any backward inside it)."""
    with FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION) as counter:
        function()
    return counter.get_total_flops()


def matmul_precision(dtype: str) -> str:
    """The precision the step's matrix multiplications run in, as the peak table names it."""
    if dtype == "bfloat16":
        return "bfloat16"
    return "float32" if torch.get_float32_matmul_precision() == "highest" else "tf32"


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The device's dense peak for `precision`, or None where it is not in PEAK_TFLOPS (e.g. a CPU)."""
    for fragment, peaks in PEAK_TFLOPS.items():
        if device_name and fragment in device_name:
            return peaks.get(precision)
    return None


def mfu(flops_per_step: int | None, step_time_s: float | None, peak: float | None) -> float | None:
    """Achieved model FLOP/s over the peak, a fraction in [0, 1]; None where a figure is missing."""
    if not flops_per_step or not step_time_s or not peak:
        return None
    return flops_per_step / step_time_s / (peak * 1e12)
