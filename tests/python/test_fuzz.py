"""The fuzz targets (tests/fuzz, scripts/fuzz.sh) run a few seconds each with libFuzzer,
ASan and UBSan: no input they find may crash a parser. A long run is one command
(scripts/fuzz.sh TARGET SECONDS); the README reports one."""
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", ["trace_reader", "config", "fabric_decode", "chakra_import"])
def test_fuzz_target_runs_without_a_crash(target):
    res = subprocess.run([str(ROOT / "scripts" / "fuzz.sh"), target, "3"], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    assert f"fuzz.sh: {target}: no crash in 3 s" in res.stdout
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", res.stdout)
    assert runs and int(runs.group(1)) > 100, res.stdout   # it did fuzz, not just start


def test_fuzz_script_rejects_bad_usage():
    res = subprocess.run([str(ROOT / "scripts" / "fuzz.sh"), "nothing", "3"], capture_output=True, text=True,
                         cwd=str(ROOT))
    assert res.returncode == 2 and "trace_reader, config, fabric_decode, chakra_import" in res.stderr, res.stderr
