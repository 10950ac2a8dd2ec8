import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"


@pytest.fixture(scope="session")
def demo_bin():
    path = BUILD / "driver_shim" / "cardsim_stream_timeline"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh first")
    return path
