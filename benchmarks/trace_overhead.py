"""trace_record_overhead_ratio: wall time of a small training step recorded into a trace
(CARDSIM_TRACE) over the same step not recorded, measured side by side in one run (two
child processes, alternating, best of each). The step is the demo's language model at its
default size, as in timing_mode.py; the traced child also completes its file at exit."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

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


def run(trace_dir) -> float:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    env.update(OMP_NUM_THREADS="1")
    if trace_dir:
        env["CARDSIM_TRACE"] = trace_dir
    out = subprocess.run([sys.executable, "-c", CHILD, root], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["wall_s_per_step"]


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="cardsim-bench-trace-")
    try:
        plain, traced = [], []
        for i in range(3):   # alternate, so that machine noise hits both alike
            plain.append(run(None))
            traced.append(run(os.path.join(tmp, str(i))))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"trace_record_overhead_ratio: {min(traced) / min(plain):.3f}")
