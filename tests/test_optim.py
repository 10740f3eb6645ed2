"""The optimizer registry: every entry builds, keeps the state it declares, and trains; AdamW is one entry."""

import pytest
import torch

from gum_utils import OPTIMIZERS, STUDY_OPTIMIZERS
from gum_utils.core.config import RunConfig, default_lr
from gum_utils.core.measure import optimizer_state_bytes
from gum_utils.core.run import train
from gum_utils.optim import REGISTRY, build_optimizer, optimizer
from gum_utils.study.profiles import cells, profile


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_each_optimizer_keeps_the_state_bytes_it_declares(name):
    model = torch.nn.Linear(10, 3)
    opt = build_optimizer(name, model.parameters(), lr=1e-3)
    model(torch.randn(4, 10)).square().sum().backward()
    opt.step(lambda: model(torch.randn(4, 10)).square().sum()) if name == "cgd" else opt.step()
    parameters = sum(p.numel() for p in model.parameters())
    extra = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                if isinstance(v, torch.Tensor) and v.numel() == 1)  # step counters: scalars, not per parameter
    assert optimizer_state_bytes(opt) - extra == parameters * optimizer(name).state_bytes_per_parameter()


def test_adamw_is_torchs_and_trains_but_is_not_part_of_the_study():
    assert optimizer("adamw").cls is torch.optim.AdamW
    assert "adamw" in OPTIMIZERS and "adamw" not in STUDY_OPTIMIZERS
    assert STUDY_OPTIMIZERS == ("sgd", "adam", "adagrad", "adadelta", "cgd")  # the paper's five
    assert {cell.optimizer for cell in cells(profile("cpu"))} == set(STUDY_OPTIMIZERS)
    assert {cell.optimizer for cell in cells(profile("smoke"), optimizers=["adamw"])} == {"adamw"}
    result = train(RunConfig("llama", optimizer="adamw", steps=8, batch_size=4, device="cpu",
                             optimizer_options={"weight_decay": 0.1}))
    assert result.status == "ok" and result.records[-1]["loss"] < result.records[0]["loss"]
    assert result.summary["lr"] == default_lr("llama", "adamw") == 1e-3


def test_an_options_name_the_optimizer_does_not_take_is_listed_with_the_valid_ones():
    assert "weight_decay" in REGISTRY["adamw"].option_names() and "line_search" in REGISTRY["cgd"].option_names()
    with pytest.raises(ValueError, match="unknown optimizer 'adamx'.*adamw"):
        optimizer("adamx")
