"""benchmarks/zero3_overhead.py measures the same DeepSpeed ZeRO-3 training on 2 emulated
ranks and on 2 CPU ranks: check that both sides train identically (the losses agree) and
that it prints its figure, and with --phases each phase's on both sides. Speed itself is a
benchmark, not a test."""
import math
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_zero3_overhead_benchmark_trains_identically_on_both_sides():
    res = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "benchmarks" / "zero3_overhead.py"),
                          "--steps", "3", "--rounds", "1", "--check", "--phases"], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    assert "zero3_losses_agree:" in res.stdout
    m = re.search(r"^zero3_step_overhead_ratio: ([0-9.]+)$", res.stdout, re.M)
    assert m and math.isfinite(float(m.group(1))) and float(m.group(1)) > 0, res.stdout
    # the phases, each synchronized on its own (the losses agree with them too)
    for phase in ("forward", "backward", "optimizer"):
        for side in ("emulated", "cpu"):
            m = re.search(rf"^zero3_{phase}_wall_s_{side}: ([0-9.]+)$", res.stdout, re.M)
            assert m and 0 < float(m.group(1)) < 60, (phase, side, res.stdout)
        assert re.search(rf"^zero3_{phase}_overhead_ratio: [0-9.]+$", res.stdout, re.M), res.stdout
