import subprocess
import sys
import time
import types

import pytest
import torch

from gum_utils.core import measure, nvml
from gum_utils.optim import build_optimizer

from helpers import model_and_batch


def test_sampler_without_gpu_records_cpu_and_leaves_gpu_fields_empty():
    with measure.Sampler(torch.device("cpu"), interval_s=0.02) as sampler:
        deadline = time.perf_counter() + 0.2
        while time.perf_counter() < deadline:
            sum(i * i for i in range(1000))
    summary = sampler.summary()
    assert len(summary["timeline"]) >= 5
    assert summary["device"] == "cpu" and summary["mean_gpu_util_percent"] is None
    assert summary["peak_rss_bytes"] > 10_000_000
    assert summary["mean_cpu_percent"] > 10
    assert all(s["gpu_util_percent"] is None for s in summary["timeline"])


def test_sampler_on_a_machine_without_a_gpu_or_nvml_measures_the_cpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the binding is not installed: import fails
    monkeypatch.setattr(nvml, "_binding", None)
    assert nvml.open_device(0) is None
    sampler = measure.Sampler(torch.device("cuda", 0), interval_s=0.01)
    with sampler:
        time.sleep(0.05)
    assert sampler.summary()["device"] == "cpu" and sampler.summary()["energy_j"] is None


class FakeNvml:
    """Stands in for pynvml: returns what NVIDIA's binding returns, raises its NVMLError where unsupported."""

    class NVMLError(Exception):
        pass

    @staticmethod
    def nvmlDeviceGetUtilizationRates(handle):
        return types.SimpleNamespace(gpu=93, memory=40)

    @staticmethod
    def nvmlDeviceGetMemoryInfo(handle):
        return types.SimpleNamespace(total=80 << 30, used=12 << 30, free=68 << 30)

    @staticmethod
    def nvmlDeviceGetPowerUsage(handle):
        return 312_500  # milliwatts

    @staticmethod
    def nvmlDeviceGetTotalEnergyConsumption(handle):
        return 5_000_000  # millijoules


def test_nvml_readings_are_converted_to_percent_bytes_watts_and_millijoules():
    device = nvml.Device(FakeNvml(), handle=None)
    assert device.utilization_percent() == 93
    assert device.memory_used_bytes() == 12 << 30
    assert device.power_w() == pytest.approx(312.5)
    assert device.energy_mj() == 5_000_000


def test_nvml_reading_a_gpu_does_not_report_is_none():
    class OldGpu(FakeNvml):
        @staticmethod
        def nvmlDeviceGetTotalEnergyConsumption(handle):
            raise FakeNvml.NVMLError("Not Supported")

    assert nvml.Device(OldGpu(), handle=None).energy_mj() is None


def test_tensor_bytes_counts_shared_storage_once():
    a = torch.zeros(100)
    assert measure.tensor_bytes([a, a[:10], a.view(10, 10), torch.zeros(5)]) == 400 + 20


def test_breakdown_is_exact_for_adam_and_sgd():
    model, batch = model_and_batch("llama")
    params = list(model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    assert measure.parameter_bytes(model) == param_bytes  # tied embeddings count once
    adam = build_optimizer("adam", params, lr=1e-3)
    from gum_utils.core import trainer

    trainer.forward_backward(model, [batch], trainer.window_items([batch]))
    adam.step()
    assert measure.gradient_bytes(model) == param_bytes
    state = measure.optimizer_state_bytes(adam)
    # exp_avg and exp_avg_sq, plus one 4-byte step counter per parameter tensor
    assert state == 2 * param_bytes + 4 * len(params)
    sgd = build_optimizer("sgd", params, lr=0.1)
    sgd.step()
    assert measure.optimizer_state_bytes(sgd) == 0


def test_saved_tensor_meter_excludes_parameters():
    layer = torch.nn.Linear(1000, 1000, bias=False)
    meter = measure.SavedTensorMeter(layer)
    x = torch.randn(2, 1000)
    with meter.recording():
        layer(x).sum().backward()
    assert meter.bytes == x.numel() * 4  # the input is saved; the weight is a parameter


HIGH_WATER = """
import torch
from gum_utils.core import measure
sampler = measure.Sampler(torch.device("cpu"), interval_s=10.0)  # no sample falls inside the peak
with sampler:
    peak = torch.ones(256 * 2**20 // 4)  # 256 MiB, touched, then freed before the next sample
    del peak
summary = sampler.summary()
print(summary["rss_high_water_bytes"] - summary["peak_rss_bytes"])
"""


def test_the_rss_high_water_mark_sees_a_peak_the_samples_miss():
    # A fresh process: in a long one the allocator may reuse pages already resident, and no peak shows.
    done = subprocess.run([sys.executable, "-c", HIGH_WATER], capture_output=True, text=True, check=True)
    assert int(done.stdout.strip().splitlines()[-1]) >= 192 * 2**20
