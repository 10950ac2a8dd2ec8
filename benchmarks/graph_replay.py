"""graph_replay_speedup_sim: simulated time of a launch-bound small model's training step
(a 6-layer 64-wide MLP, forward, backward and SGD), eager over the same step captured into
one graph and replayed, on the emulated MLU370-X8 (the card's graph launch costs one host
launch and a small dispatch per node instead of a launch per kernel). Simulated time is
deterministic: one run suffices."""
import json
import os
import subprocess
import sys

CHILD = r"""
import json, torch, torch_mlu
dm = torch.mlu
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)]).to("mlu")
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, t = torch.randn(32, 64, device="mlu"), torch.randn(32, 64, device="mlu")
def step():
    opt.zero_grad(set_to_none=False)
    torch.nn.functional.mse_loss(m(x), t).backward()
    opt.step()
side = dm.Stream(); side.wait_stream(dm.current_stream())
with dm.stream(side):
    for _ in range(3):
        step()
dm.current_stream().wait_stream(side)
def timed(f, n=10):
    a, b = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    dm.synchronize(); a.record()
    for _ in range(n):
        f()
    b.record(); b.synchronize()
    return a.elapsed_time(b) / n
eager = timed(step)
g = dm.MLUGraph()
with dm.graph(g):
    step()
print(json.dumps(dict(eager_ms=eager, graph_ms=timed(g.replay), nodes=g.node_count())))
"""


def main() -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        return 1
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"graph_replay_speedup_sim: {r['eager_ms'] / r['graph_ms']:.2f}")
    print(f"graph_replay_step_sim_ms: {r['graph_ms']:.4f} (eager {r['eager_ms']:.4f}, {r['nodes']} nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
