"""CARDSIM_CHECK=async for a whole process: planted bugs reported on stderr (or raised with
``,raise``), a bad value refused with the valid ones, a collective used on a stream that did
not wait reported on every rank, and DeepSpeed ZeRO-3 with overlap_comm (its reduction
stream, events and record_stream) training on two ranks of each card with nothing reported."""
import re

import pytest

from conftest import ROOT, run_python, run_ranks

CARDS = ["mlu", "supa"]

PLANTED = r'''
import sys, torch, importlib
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
side = dm.Stream()
x = torch.ones(4096, device=card)
for i in range(3):
    y = x * 2                      # PRODUCER
    with dm.stream(side):
        z = y + 1                  # OFFENDER
    dm.synchronize()
print("finished", float(z.sum().item()))
'''


def _line(code: str, tag: str) -> int:
    return next(i for i, ln in enumerate(code.splitlines(), 1) if tag in ln)


@pytest.mark.parametrize("card", CARDS)
def test_env_reports_a_planted_race_once_with_both_stacks(card):
    p = run_python(PLANTED, env={"CARDSIM_CHECK": "async"}, args=[card])
    assert p.returncode == 0, p.stderr
    assert "finished 12288.0" in p.stdout
    blocks = re.findall(r"^cardsim check: .*?(?=^\S|\Z)", p.stderr, re.S | re.M)
    assert len(blocks) == 1, p.stderr   # once per site, not once per iteration
    b = blocks[0]
    assert b.startswith("cardsim check: stream race:")
    assert f'File "<string>", line {_line(PLANTED, "PRODUCER")}' in b.split("offender:")[0]
    assert f'File "<string>", line {_line(PLANTED, "OFFENDER")}' in b.split("offender:")[1]


def test_env_raise_mode_raises_at_the_offending_line():
    p = run_python(PLANTED, env={"CARDSIM_CHECK": "async,raise"}, args=["mlu"])
    assert p.returncode == 1
    assert "AsyncCheckError: cardsim check: stream race" in p.stderr
    assert f'File "<string>", line {_line(PLANTED, "OFFENDER")}' in p.stderr.split("Traceback")[1]
    assert "finished" not in p.stdout


def test_env_off_and_bad_values():
    p = run_python(PLANTED, env={"CARDSIM_CHECK": "0"}, args=["mlu"])
    assert p.returncode == 0 and "cardsim check" not in p.stderr
    p = run_python(PLANTED, env={"CARDSIM_CHECK": "asynch"}, args=["mlu"])
    assert p.returncode != 0
    assert "CARDSIM_CHECK='asynch'" in p.stderr and "valid: async, async,raise" in p.stderr


COLLECTIVE = r'''
import os, sys, torch, importlib, torch.distributed as dist
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
dist.init_process_group({"mlu": "cncl", "supa": "bccl"}[card])
side = dm.Stream()
g = torch.full((1024,), float(dist.get_rank() + 1), device=card)
g.mul_(2)                            # PRODUCER
with dm.stream(side):
    dist.all_reduce(g)               # OFFENDER: the side stream never waited for the mul
side.synchronize()
dm.current_stream().wait_stream(side)
ok = torch.full((1024,), 1.0, device=card)
side.wait_stream(dm.current_stream())
with dm.stream(side):
    dist.all_reduce(ok)              # ordered: no report
side.synchronize()
print("RESULT", g[0].item(), ok[0].item())
dist.destroy_process_group()
'''


@pytest.mark.parametrize("card", CARDS)
def test_a_collective_on_a_stream_that_did_not_wait_is_reported_on_every_rank(card):
    out = run_ranks(COLLECTIVE, 2, args=[card], env={"CARDSIM_CHECK": "async"})
    for rc, o, e in out:
        assert rc == 0, e
        assert "RESULT 6.0 2.0" in o
        blocks = re.findall(r"^cardsim check: .*?(?=^\S|\Z)", e, re.S | re.M)
        assert len(blocks) == 1, e
        assert "writes it in " + {"mlu": "cncl", "supa": "bccl"}[card] + " allreduce" in blocks[0]
        assert f'line {_line(COLLECTIVE, "OFFENDER")}' in blocks[0]


ZERO3 = r'''
import runpy, sys
sys.argv = ["train_lm.py", "--card", sys.argv[1], "--steps", "2", "--zero-stage", "3",
            "--precision", "bf16", "--dim", "64"]
runpy.run_path("accelerators/examples/train_lm.py", run_name="__main__")
'''


@pytest.mark.parametrize("card", CARDS)
def test_deepspeed_zero3_with_overlap_comm_reports_nothing(card):
    out = run_ranks(ZERO3, 2, args=[card], env={"CARDSIM_CHECK": "async"}, timeout=600)
    for rank, (rc, o, e) in enumerate(out):
        assert rc == 0, f"rank {rank}\n{o[-2000:]}\n{e[-4000:]}"
        assert "cardsim check" not in e, e
    assert "peak mem" in out[0][1]


ROGUE = r'''
import ctypes, sys, torch, importlib
card = sys.argv[1]
importlib.import_module("torch_" + card)
x = torch.arange(64, dtype=torch.float32, device=card)
print("sum", x.sum().item(), flush=True)            # the runtime's own access: fine
v = ctypes.c_float.from_address(x.data_ptr() + 8).value   # ROGUE: host code dereferences device memory
print("read", v, flush=True)
'''


@pytest.mark.parametrize("card", CARDS)
def test_host_dereference_of_device_memory_stops_naming_the_allocation(card):
    p = run_python(ROGUE, env={"CARDSIM_CHECK": "async"}, args=[card])
    assert p.returncode in (-11, 139), (p.returncode, p.stderr)   # stopped by the fault
    assert "sum 2016.0" in p.stdout and "read" not in p.stdout
    m = re.search(r"cardsim check: host access to device memory: the host dereferenced device address "
                  r"0x([0-9a-f]+) \(device 0, in the allocation at 0x([0-9a-f]+) of (\d+) bytes, offset (\d+)\)",
                  p.stderr)
    assert m, p.stderr
    assert int(m.group(1), 16) - int(m.group(2), 16) == int(m.group(4)) == 8
    assert int(m.group(3)) >= 64 * 4
    # the Python stack of the access follows (Python's faulthandler)
    assert f'File "<string>", line {_line(ROGUE, "ROGUE")}' in p.stderr
    # without the checker the emulator's device memory is host memory: the same read "works"
    p = run_python(ROGUE, args=[card])
    assert p.returncode == 0 and "read 2.0" in p.stdout
