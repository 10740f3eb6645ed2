import copy

import pytest
import torch

from gum_utils import ARCHITECTURES
from gum_utils.core import strategies, trainer
from gum_utils.core.batches import count_items, split_batch
from gum_utils.core.measure import SavedTensorMeter

from helpers import gradients, model_and_batch


def full_gradient(model, batch, strategy="standard", micro=None):
    strategies.strategy(strategy).prepare(model)
    micros = strategies.strategy(strategy).micro_batches(batch, micro or batch["labels"].shape[0])
    model.zero_grad(set_to_none=True)
    loss = trainer.forward_backward(model, micros, trainer.window_items(micros))
    return loss, gradients(model)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_checkpointing_gives_identical_gradients(arch):
    model, batch = model_and_batch(arch)
    twin = copy.deepcopy(model)
    loss, grads = full_gradient(model, batch)
    loss_ckpt, grads_ckpt = full_gradient(twin, batch, "checkpointing")
    assert strategies.is_checkpointing(twin) and not strategies.is_checkpointing(model)
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys() and len(grads) > 0
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], rtol=0, atol=1e-7, msg=name)


def saved_bytes(model, batch):
    meter = SavedTensorMeter(model)
    with meter.recording():
        trainer.summed_loss(model, batch).backward()
    return meter.bytes


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_checkpointing_engages_in_train_mode_and_saves_activation_bytes(arch):
    model, batch = model_and_batch(arch)
    standard = saved_bytes(model, batch)
    strategies.strategy("checkpointing").prepare(model)
    checkpointed = saved_bytes(model, batch)
    assert 0 < checkpointed < 0.7 * standard, (checkpointed, standard)
    model.eval()  # the models checkpoint only while training
    assert saved_bytes(model, batch) > 0.9 * standard


@pytest.mark.parametrize("arch", ["llama", "modernbert", "nanovlm", "vit"])
def test_accumulation_equals_the_full_batch_gradient_with_padding(arch):
    model, batch = model_and_batch(arch, batch_size=16)
    twin = copy.deepcopy(model)
    loss, grads = full_gradient(model, batch)
    loss_acc, grads_acc = full_gradient(twin, batch, "accumulation", micro=4)
    torch.testing.assert_close(loss_acc, loss, rtol=1e-6, atol=1e-6)
    for name in grads:
        torch.testing.assert_close(grads_acc[name], grads[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_mean_of_micro_batch_means_is_not_the_full_batch_gradient():
    """The 2024 accumulation bug: with padding, averaging per-micro-batch means is wrong."""
    model, batch = model_and_batch("llama", batch_size=16)
    micros = split_batch(batch, 4)
    counts = [count_items(m) for m in micros]
    assert len(set(counts)) > 1, "padding must make the micro-batches hold different token counts"
    _, grads = full_gradient(model, batch)
    model.zero_grad(set_to_none=True)
    for micro, count in zip(micros, counts):
        (trainer.summed_loss(model, micro) / count / len(micros)).backward()
    wrong = gradients(model)
    assert any(not torch.allclose(wrong[n], grads[n], rtol=1e-4, atol=1e-6) for n in grads)


def test_micro_batches_split_only_for_accumulation():
    _, batch = model_and_batch("vit", batch_size=8)
    assert len(strategies.strategy("standard").micro_batches(batch, 2)) == 1
    assert [m["labels"].shape[0] for m in strategies.strategy("accumulation").micro_batches(batch, 2)] == [2] * 4


def test_unknown_strategy_names_the_valid_choices():
    with pytest.raises(ValueError, match="standard, checkpointing, accumulation, offload"):
        strategies.strategy("cpu_offload")
