"""Ending a distributed program without destroy_process_group(), as most training scripts
do: every rank exits with its own status and no abort, because the cncl/bccl backends
destroy the process groups at exit while the interpreter is still whole."""
import os
import socket
import subprocess

import pytest

from conftest import PYTHON, ROOT

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(card: str, status: int):
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        for k in ("CARDSIM_PRESET", "CARDSIM_DEVICES", "CARDSIM_CONFIG", "DS_ACCELERATOR"):
            env.pop(k, None)
        env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port)
        procs.append(subprocess.Popen([PYTHON, "-c", WORKER, card, str(status)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT)))
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, o, e))
    return out


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_exit_without_destroy_process_group(card):
    # The abort this guards against came at random; a few rounds make a regression show.
    for status in (0, 0, 3):
        for rank, (rc, o, e) in enumerate(run_ranks(card, status)):
            assert rc == status, f"{card} rank {rank}: exit status {rc}, not {status}\n{o}\n{e[-3000:]}"
            assert "terminate called" not in e, e[-3000:]
            assert "done" in o and "at exit: initialized=False" in o, (o, e[-3000:])
