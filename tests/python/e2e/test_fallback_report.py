"""CARDSIM_REPORT_FALLBACKS=1 lists, at exit, the operators that ran through the generic
CPU fallback (and only those); without it nothing is printed."""
import pytest

PROGRAM = """
import torch, torch_{card}
x = torch.arange(6., device="{card}")
y = (x * 2 + 1).relu().sum()          # costed and unboxed kernels: not fallbacks
z = torch.atan2(x, x + 1)             # no cost model of its own: atan2.out runs in the generic fallback
print("listed", sorted(torch.{card}.fallback_operators()))
"""


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_report_at_exit_lists_fallen_back_operators(py, card):
    r = py(PROGRAM.format(card=card), env={"CARDSIM_REPORT_FALLBACKS": "1"})
    assert r.returncode == 0, r.stderr
    assert "listed ['aten::atan2.out']" in r.stdout, r.stdout
    report = [line for line in r.stderr.splitlines() if line.startswith("cardsim:")]
    assert report == ["cardsim: 1 operator(s) ran through the CPU fallback: aten::atan2.out"], r.stderr


def test_no_report_without_the_variable(py):
    r = py(PROGRAM.format(card="mlu"))
    assert r.returncode == 0, r.stderr
    assert "CPU fallback" not in r.stderr
