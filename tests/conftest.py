import os

import pytest
import torch

# Runs record no memory plan in the tests (and the processes they start): tests/test_plan.py tests
# the planner, and one test of test_train.py turns it on.
os.environ.setdefault("GUM_PLAN_CACHE", "off")


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    yield
