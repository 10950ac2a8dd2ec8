"""accelerators/examples/profile_step.py: the profiled training step's table, Chrome trace and
timeline picture, on both cards."""
import json

import pytest


@pytest.mark.parametrize("card,device", [("mlu", "MLU"), ("supa", "SUPA")])
def test_profile_step_example(py, root, tmp_path, card, device):
    trace, png = tmp_path / "step.json", tmp_path / "step.png"
    res = py(f"import runpy, sys; sys.argv = ['profile_step', '--card', {card!r}, '--trace', {str(trace)!r}, "
             f"'--png', {str(png)!r}]; runpy.run_path({str(root / 'accelerators/examples/profile_step.py')!r}, "
             "run_name='__main__')")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Self {device}" in res.stdout and "aten::mm" in res.stdout, res.stdout[-3000:]
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) > 50 and all(e["args"]["device"] == f"{card}:0" for e in kernels)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
