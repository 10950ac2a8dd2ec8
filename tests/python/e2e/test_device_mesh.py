"""torch's DeviceMesh and functional collectives over cncl/bccl: the groups carry their names
(DeepSpeed's AutoTP checkpointing builds a DeviceMesh; it failed with "ProcessGroup name not
set" found by DeepSpeed's own unit tests)."""
import json

import pytest

from conftest import run_ranks

WORKER = r'''
import json, os, sys, importlib, torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
card = sys.argv[1]
importlib.import_module("torch_" + card)
rank = int(os.environ["RANK"])
getattr(torch, card).set_device(rank)
dist.init_process_group({"mlu": "cncl", "supa": "bccl"}[card])
mesh = init_device_mesh(card, (2,))
g = mesh.get_group()
sub = dist.new_group([0, 1])
t = torch.full((3,), float(rank + 1), device=card)
out = dict(name=g.group_name, sub=sub.group_name, backend=dist.get_backend(g),
           funcol=funcol.all_reduce(t, "sum", mesh).cpu().tolist(),
           gathered=funcol.all_gather_tensor(t, 0, mesh).cpu().tolist())
dist.all_reduce(t, group=sub)
out["sub_sum"] = t.cpu().tolist()
print("RESULT " + json.dumps(out))
'''


@pytest.mark.parametrize("card,backend", [("mlu", "cncl"), ("supa", "bccl")])
def test_device_mesh_and_functional_collectives(card, backend):
    names = set()
    for rank, (rc, o, e) in enumerate(run_ranks(WORKER, 2, args=(card,))):
        assert rc == 0, e[-3000:]
        r = json.loads(o.split("RESULT ", 1)[1])
        assert r["name"] and r["sub"] and r["name"] != r["sub"], r
        assert r["backend"] == backend
        assert r["funcol"] == [3.0] * 3 and r["gathered"] == [1.0] * 3 + [2.0] * 3, r
        assert r["sub_sum"] == [3.0] * 3
        names.add((r["name"], r["sub"]))
    assert len(names) == 1      # the ranks agree on the groups' names
