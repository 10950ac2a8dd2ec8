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


@pytest.fixture(scope="session")
def launched(dm):
    """launched(fn): runs fn and returns the kernels it launched on the card, from the
    activity records: (name, duration in ps, flops, bytes read + written)."""
    from cardsim_torch import _C

    def kernels(fn):
        dm.synchronize()
        _C._set_activity_recording(True)
        _C._drain_activities()
        try:
            fn()
            dm.synchronize()
            acts = _C._drain_activities()
        finally:
            _C._set_activity_recording(False)
        return [(a[3], a[5] - a[4], a[6], a[7]) for a in acts if a[0] == "kernel"]
    return kernels
