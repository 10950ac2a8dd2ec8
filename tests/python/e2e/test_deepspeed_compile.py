"""DeepSpeed's engine.compile() on the emulated card: the accelerator's compile backend is
Inductor, whose kernels run on the card (cardsim_torch/inductor.py). A ZeRO-3 step compiled
trains as the eager one does."""
import json
import os

import pytest

SCRIPT = r"""
import json, os, sys, socket, importlib, torch
card = sys.argv[1]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                  DS_ACCELERATOR=card)
importlib.import_module("torch_" + card)
import deepspeed
from deepspeed.accelerator import get_accelerator

def train(compiled):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 8))
    cfg = {"train_micro_batch_size_per_gpu": 4, "steps_per_print": 10**9, "zero_optimization": {"stage": 3},
           "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    if compiled:
        engine.compile()
    torch.manual_seed(1)
    losses = []
    for _ in range(3):
        x, y = torch.randn(4, 32, device=card), torch.randn(4, 8, device=card)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses, engine.is_compiled

eager, _ = train(False)
compiled, is_compiled = train(True)
print("RESULT " + json.dumps(dict(eager=eager, compiled=compiled, is_compiled=is_compiled,
                                  backend=get_accelerator().get_compile_backend())))
"""


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_a_compiled_zero3_engine_trains_as_the_eager_one(py, card):
    res = py(SCRIPT, args=(card,), timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    assert out["backend"] == "inductor" and out["is_compiled"]
    assert out["compiled"] == pytest.approx(out["eager"], rel=1e-5)
    assert out["eager"][0] != out["eager"][-1]   # it trained
