import os

import pytest
import torch

# Runs record no memory plan in the tests (and the processes they start): tests/test_plan.py tests
# the planner, and one test of test_train.py turns it on.
os.environ.setdefault("GUM_PLAN_CACHE", "off")

# `make test` runs the suite in two pytest-xdist workers on two cores: each trains in one thread, or
# the two spin-wait on each other (a run of six steps took 5-10 s beside the other worker, 0.9 s
# alone). The processes the tests start keep torch's own thread count, so tests that compare a run in
# this process with one in another bit for bit ask for the same count (`all_cores`).
ALL_CORES = torch.get_num_threads()
if "PYTEST_XDIST_WORKER" in os.environ:
    torch.set_num_threads(1)


@pytest.fixture
def all_cores():
    before = torch.get_num_threads()
    torch.set_num_threads(ALL_CORES)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    yield
