"""The device suite runs in-process against one personality: CARDSIM_TEST_CARD=mlu
(default) or supa. scripts/test.sh runs it once for each."""
import importlib
import os

import pytest
import torch

CARD = os.environ.get("CARDSIM_TEST_CARD", "mlu")
importlib.import_module(f"torch_{CARD}")


def pytest_addoption(parser):
    parser.addoption("--cardsim-expect-extension", default=None, metavar="DIR",
                     help="fail unless cardsim_torch._C was loaded from DIR (the sanitizer run "
                          "checks that it tests its own build of the extension)")


def pytest_configure(config):
    want = config.getoption("--cardsim-expect-extension")
    if want:
        from cardsim_torch import _C
        got = os.path.dirname(os.path.realpath(_C.__file__))
        if got != os.path.realpath(want):
            raise pytest.UsageError(f"cardsim_torch._C was loaded from {got}, not from {want}")


@pytest.fixture(scope="session")
def card() -> str:
    """The device type name: 'mlu' or 'supa'."""
    return CARD


@pytest.fixture(scope="session")
def dm():
    """The torch.cuda-like module of the card: torch.mlu or torch.supa."""
    return getattr(torch, CARD)


@pytest.fixture(autouse=True)
def _restore_device_and_streams(dm):
    """Every test starts and ends on device 0 with the default streams current."""
    dm.set_device(0)
    yield
    for i in range(dm.device_count()):
        dm.set_stream(dm.default_stream(i))
    dm.set_device(0)
    dm.synchronize()
