"""zero3_step_overhead_ratio: wall time of a DeepSpeed ZeRO-3 training step of a small model
(train_lm.py's TinyLM, fp32, torch's Adam on both sides so that neither compiles an
extension) on 2 emulated ranks (mlu, cncl) over the same step on 2 CPU ranks (DeepSpeed's
CPU accelerator with gloo), measured side by side in one run: rounds
alternate between the two, each round a fresh 2-rank job of --steps steps; per round the
median step after the first two (warm-up) counts, and the best round of each side is
compared (target <= 1.3). Also prints both step times; --check asserts the two sides'
losses agree (the same training, only the device differs). --phases also times the step's
three phases (forward, backward, engine.step()), each ended by the accelerator's
synchronize, on both sides: where the emulated step spends its extra time (a run with
--phases waits for the device three times a step, so its step times are not the ratio's).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import two_ranks
from two_ranks import ROOT

WORKER = r'''
import os, sys, time, json, warnings, importlib
warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.join(sys.argv[3], "accelerators", "examples"))
mode, steps, phased = sys.argv[1], int(sys.argv[2]), sys.argv[4] == "phases"
import torch
if mode != "cpu":
    importlib.import_module(f"torch_{mode}")
from train_lm import TinyLM, batches
import deepspeed
from deepspeed.accelerator import get_accelerator
deepspeed.init_distributed(dist_backend="gloo" if mode == "cpu" else None)
torch.manual_seed(0)
model = TinyLM(512, 128, 2, 4, 64)
cfg = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
       "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}}, "zero_optimization": {"stage": 3},
       "steps_per_print": 10**9}
engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
times, losses, phases = [], [], []
def phase_done(t):   # --phases: the phase's work done on the device, its wall time kept
    get_accelerator().synchronize()
    phases[-1].append(time.perf_counter() - t)
    return time.perf_counter()
for x, y in batches(steps, 8, 64, 512, engine.global_rank, engine.world_size):
    t0 = t = time.perf_counter()
    phases.append([])
    x, y = x.to(engine.device), y.to(engine.device)
    loss = engine(x, y)
    if phased:
        t = phase_done(t)
    engine.backward(loss)
    if phased:
        t = phase_done(t)
    engine.step()
    if phased:
        t = phase_done(t)
    losses.append(loss.item())      # the step is done on the device when its loss is read
    times.append(time.perf_counter() - t0)
if engine.global_rank == 0:
    print("RESULT " + json.dumps({"times": times, "losses": losses, "phases": phases}), flush=True)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
if mode == "cpu":
    # Plain Gloo can abort the CPU reference at interpreter exit ("terminate called without
    # an active exception": its worker thread letting go of tensors during finalization, the
    # hazard cardsim's gloo_hold guards its own backends against). Its exit is not measured.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
'''


PHASES = ("forward", "backward", "optimizer")   # the last: engine.step()


def job(mode: str, steps: int, env: dict | None = None, phases: bool = False) -> dict:
    """One 2-rank job; returns rank 0's step times, losses and (phases) each step's phase times."""
    return two_ranks.run(f"zero3_overhead: the {mode} job", WORKER,
                         [mode, str(steps), str(ROOT), "phases" if phases else "whole"],
                         dict(env or {}, DS_ACCELERATOR=mode))[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="assert both sides' losses agree (rel 1e-4)")
    ap.add_argument("--no-fabric-server", action="store_true",
                    help="the emulated ranks time their collectives alone (CARDSIM_FABRIC=off): what the server costs")
    ap.add_argument("--phases", action="store_true",
                    help="also time forward, backward and engine.step() apart, each ended by a device synchronize")
    args = ap.parse_args(argv)
    best = {"mlu": float("inf"), "cpu": float("inf")}
    phase_best = {(mode, p): float("inf") for mode in best for p in PHASES}
    losses = {}
    for _ in range(args.rounds):
        for mode in ("mlu", "cpu"):
            r = job(mode, args.steps, {"CARDSIM_FABRIC": "off"} if mode == "mlu" and args.no_fabric_server else None,
                    phases=args.phases)
            timed = r["times"][2:] or r["times"]
            best[mode] = min(best[mode], statistics.median(timed))
            losses[mode] = r["losses"]
            steps = r["phases"][2:] or r["phases"]
            for i, p in enumerate(PHASES if args.phases else ()):
                phase_best[mode, p] = min(phase_best[mode, p], statistics.median(s[i] for s in steps))
    if args.check:
        for a, b in zip(losses["mlu"], losses["cpu"]):
            assert abs(a - b) <= 1e-4 * abs(b), (losses["mlu"], losses["cpu"])
        print("zero3_losses_agree: " + json.dumps(losses["mlu"]))
    print(f"zero3_step_wall_s_emulated: {best['mlu']:.4f}")
    print(f"zero3_step_wall_s_cpu: {best['cpu']:.4f}")
    print(f"zero3_step_overhead_ratio: {best['mlu'] / best['cpu']:.3f}")
    for p in PHASES if args.phases else ():
        emulated, cpu = phase_best["mlu", p], phase_best["cpu", p]
        print(f"zero3_{p}_wall_s_emulated: {emulated:.4f}")
        print(f"zero3_{p}_wall_s_cpu: {cpu:.4f}")
        print(f"zero3_{p}_overhead_ratio: {emulated / cpu:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
