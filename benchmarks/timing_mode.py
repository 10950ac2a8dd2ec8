"""timing_mode_speedup: wall time of a training step in full mode over the same step in
timing mode (CARDSIM_EXECUTION=timing), measured side by side in one run (two child
processes, one per mode). The step is the demo's language model at its default size."""
import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys, time, torch
sys.path.insert(0, os.path.join(sys.argv[1], "accelerators", "examples"))
import torch_mlu
from train_lm import TinyLM, batches
torch.manual_seed(0)
model = TinyLM(512, 128, 2, 4, 64).to("mlu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = [(x.to("mlu"), y.to("mlu")) for x, y in batches(8, 8, 64, 512, 0, 1)]
def step(x, y):
    opt.zero_grad()
    model(x, y).backward()
    opt.step()
for x, y in data[:3]:
    step(x, y)
torch.mlu.synchronize()
t0 = time.perf_counter()
for x, y in data[3:]:
    step(x, y)
torch.mlu.synchronize()
print(json.dumps({"wall_s_per_step": (time.perf_counter() - t0) / len(data[3:])}))
"""


def run(mode: str) -> float:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    env.update(CARDSIM_EXECUTION=mode, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, root], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["wall_s_per_step"]


if __name__ == "__main__":
    full, timing = run("full"), run("timing")
    print(f"timing_mode_step_wall_s: {timing:.4f}")
    print(f"timing_mode_speedup: {full / timing:.2f}")
