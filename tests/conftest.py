import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    yield
