"""Ending a distributed program without destroy_process_group(), as most training scripts
do: every rank exits with its own status and no abort, because the cncl/bccl backends
destroy the process groups at exit while the interpreter is still whole."""
import pytest

from conftest import run_ranks

WORKER = r'''
import atexit, importlib, os, sys
from datetime import timedelta
import torch
import torch.distributed as dist

CARD = sys.argv[1]
STATUS = int(sys.argv[2])
importlib.import_module(f"torch_{CARD}")
rank = int(os.environ["RANK"])
# Registered before the backend's own handler, so it runs after it (atexit is LIFO).
atexit.register(lambda: print(f"at exit: initialized={dist.is_initialized()}", flush=True))
getattr(torch, CARD).set_device(rank)
dist.init_process_group({"mlu": "cncl", "supa": "bccl"}[CARD], timeout=timedelta(seconds=60))
extra = dist.new_group([0, 1])
d = torch.device(CARD, rank)
t = torch.full((4096,), float(rank + 1), device=d)
for _ in range(5):
    dist.all_reduce(t)
    dist.all_reduce(t, group=extra)
    dist.all_gather_into_tensor(torch.empty(8192, device=d), t[:4096])
assert t.cpu()[0].item() == 3.0 * 2 ** 9, t.cpu()[0]   # (1 + 2), then doubled 9 times
# Work left in flight at exit: an unwaited send/receive pair.
if rank == 0:
    dist.isend(torch.ones(16, device=d), dst=1)
else:
    dist.irecv(torch.empty(16, device=d), src=0)
print("done", flush=True)
sys.exit(STATUS)
'''


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_exit_without_destroy_process_group(card):
    # The abort this guards against came at random; a few rounds make a regression show.
    for status in (0, 0, 3):
        for rank, (rc, o, e) in enumerate(run_ranks(WORKER, 2, args=(card, status))):
            assert rc == status, f"{card} rank {rank}: exit status {rc}, not {status}\n{o}\n{e[-3000:]}"
            assert "terminate called" not in e, e[-3000:]
            assert "done" in o and "at exit: initialized=False" in o, (o, e[-3000:])


DESTROYED = r'''
import atexit, importlib, os, sys
import torch
import torch.distributed as dist
from cardsim_torch import gloo_hold

CARD = sys.argv[1]
importlib.import_module(f"torch_{CARD}")
rank = int(os.environ["RANK"])
# Runs after the backend's exit handler (atexit is LIFO): by then Gloo let go of everything.
atexit.register(lambda: print(f"held at exit: {gloo_hold.held()}", flush=True))
getattr(torch, CARD).set_device(rank)
dist.init_process_group({"mlu": "cncl", "supa": "bccl"}[CARD])
d = torch.device(CARD, rank)
for i in range(20):
    t = torch.full((1024,), float(rank + 1), device=d)
    dist.all_reduce(t)                  # its host view goes to Gloo and is dropped here at once
    dist.all_gather_into_tensor(torch.empty(2048, device=d), t)
assert t.cpu()[0].item() == 3.0
dist.destroy_process_group()            # the program's own teardown, then straight to exit
print("done", flush=True)
'''


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_exit_right_after_destroying_the_groups_waits_for_gloo_to_let_go(card):
    # Gloo's worker drops its last reference to a finished collective's tensors a moment after
    # wait() returns; dropped during interpreter finalization, that aborted the process.
    for rank, (rc, o, e) in enumerate(run_ranks(DESTROYED, 2, args=(card,))):
        assert rc == 0, f"{card} rank {rank}: exit status {rc}\n{o}\n{e[-3000:]}"
        assert "terminate called" not in e, e[-3000:]
        assert "done" in o and "held at exit: 0" in o, (o, e[-3000:])


BROKEN = r'''
import importlib, os, sys
from datetime import timedelta
import torch
import torch.distributed as dist

CARD, ENDING = sys.argv[1], sys.argv[2]
importlib.import_module(f"torch_{CARD}")
rank = int(os.environ["RANK"])
getattr(torch, CARD).set_device(rank)
dist.init_process_group({"mlu": "cncl", "supa": "bccl"}[CARD], timeout=timedelta(seconds=30))
x = torch.full((4,), float(rank), device=torch.device(CARD, rank))
try:
    dist.broadcast(x, src=rank)      # every rank its own root: the ranks disagree
except dist.DistBackendError as e:
    print("caught:", str(e)[:120], flush=True)
print("done", flush=True)
if ENDING == "exit 3":
    sys.exit(3)
if ENDING == "raise":
    raise RuntimeError("the program's own error")
'''


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_a_program_that_caught_a_collectives_error_ends_with_its_own_status(card):
    # The group's Gloo transfers are left out of step (no shutdown in time): the process
    # ends without finalizing the interpreter, whose teardown of them aborted it at random.
    for ending, status in (("normally", 0), ("exit 3", 3), ("raise", 1), ("normally", 0)):
        for rank, (rc, o, e) in enumerate(run_ranks(BROKEN, 2, args=(card, ending))):
            assert rc == status, f"{card} {ending} rank {rank}: exit status {rc}, not {status}\n{o}\n{e[-3000:]}"
            assert "terminate called" not in e, e[-3000:]
            assert "caught: " in o and "the ranks disagree" in o and "done" in o, (o, e[-3000:])
            if ending == "raise":
                assert "RuntimeError: the program's own error" in e, e[-3000:]
