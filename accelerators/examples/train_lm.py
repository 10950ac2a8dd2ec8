"""Trains a small transformer language model with DeepSpeed on emulated cards.

Run it under a launcher (``deepspeed`` or ``torchrun``) with DS_ACCELERATOR set to the
card (``scripts/demo.sh`` does). Rank 0 prints, per step: the loss, the simulated step
time (the slowest rank's: each rank's card keeps its own clock), tokens per simulated
second (all ranks' tokens over that time), peak device memory, compute utilization
(FLOPs rank 0's card executed over the step, against the card's peak for the training
dtype), and how rank 0's card spent the step: compute (time any kernel, memset or on-card
copy ran), communication (time any collective ran, waiting for the other ranks included)
and exposed communication (communication while no compute ran: what overlap did not hide).
The loss is the mean of all ranks' losses, the loss of the global batch.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings

import torch


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int, seq: int):
        super().__init__()
        self.vocab = vocab
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.zeros(seq, dim))
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True,
                                             norm_first=True)
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, x, y):
        h = self.tok(x) + self.pos[: x.shape[1]]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device,
                                                                    dtype=h.dtype)
        for b in self.blocks:
            h = b(h, src_mask=mask, is_causal=True)
        logits = self.head(self.norm(h)).float()
        return torch.nn.functional.cross_entropy(logits.view(-1, self.vocab), y.view(-1))


def batches(steps: int, batch: int, seq: int, vocab: int, rank: int, world: int):
    """The same global token stream for any world size; each rank takes its slice. Each
    sequence follows t[i+1] = (5 t[i] + 3) mod vocab from a random start, so the loss
    can fall."""
    g = torch.Generator().manual_seed(1234)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch * world, 1), generator=g)
        cols = [start]
        for _ in range(seq):
            cols.append((cols[-1] * 5 + 3) % vocab)
        data = torch.cat(cols, dim=1)
        mine = data[rank * batch:(rank + 1) * batch]
        yield mine[:, :-1].contiguous(), mine[:, 1:].contiguous()


_COMPUTE_KINDS = ("kernel", "memset", "memcpy DtoD")


def _union(intervals):
    """Merged, sorted [start, end) intervals."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _minus(xs, ys) -> float:
    """Length of the merged intervals xs outside the merged intervals ys."""
    total, j = 0.0, 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            if ys[k][0] > cur:
                total += ys[k][0] - cur
            cur = max(cur, ys[k][1])
            k += 1
        if cur < b:
            total += b - cur
    return total


def step_split(activities):
    """(compute, communication, exposed communication) in ns of one card's activities."""
    compute = _union((a[4], a[5]) for a in activities if a[0] in _COMPUTE_KINDS)
    comm = _union((a[4], a[5]) for a in activities if a[0] == "collective")
    return _length(compute), _length(comm), _minus(comm, compute)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--card", default=os.environ.get("DS_ACCELERATOR", "mlu"), choices=["mlu", "supa"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--zero-stage", type=int, default=3)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--json", help="write the per-step records here (rank 0)")
    ap.add_argument("--local_rank", type=int, default=None)   # the deepspeed launcher passes it
    args = ap.parse_args(argv)

    os.environ.setdefault("DS_ACCELERATOR", args.card)
    # DeepSpeed 0.19.8 still calls the collectives torch now calls deprecated.
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    importlib.import_module(f"torch_{args.card}")
    dev_mod = getattr(torch, args.card)
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    torch.manual_seed(0)
    model = TinyLM(args.vocab, args.dim, args.layers, 4, args.seq)
    cfg = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "weight_decay": 0.0}},
        "zero_optimization": {"stage": args.zero_stage, "reduce_bucket_size": 2_000_000,
                              "allgather_bucket_size": 2_000_000,
                              "stage3_prefetch_bucket_size": 2_000_000},
        "steps_per_print": 10 ** 9,
    }
    if args.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif args.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 12}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    rank, world = engine.global_rank, engine.world_size
    acc = get_accelerator()
    props = dev_mod.get_device_properties(engine.device)
    peak = {"fp32": props.peak_fp32_flops, "bf16": props.peak_bf16_flops,
            "fp16": props.peak_fp16_flops}[args.precision]
    from cardsim_torch import _C
    # Step statistics travel over a host-only group, so gathering them costs no card time.
    stats = torch.distributed.new_group(backend="gloo") if world > 1 else None

    if rank == 0:
        print(f"DeepSpeed {deepspeed.__version__} on {world} emulated {props.name} "
              f"({type(acc).__name__}, backend {acc.communication_backend_name()}), "
              f"ZeRO stage {args.zero_stage}, {args.precision}, "
              f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")
        print(f"{'step':>4} {'loss':>9} {'sim step ms':>12} {'tokens/sim s':>13} "
              f"{'peak mem MiB':>13} {'compute util':>12} {'compute ms':>11} {'comm ms':>9} "
              f"{'exposed ms':>11}")
    records = []
    _C._set_activity_recording(True)
    for step, (x, y) in enumerate(batches(args.steps, args.batch, args.seq, args.vocab, rank, world)):
        dev_mod.synchronize()
        _C._drain_activities()
        t0 = dev_mod.host_time_ns()
        x, y = x.to(engine.device), y.to(engine.device)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        dev_mod.synchronize()
        t1 = dev_mod.host_time_ns()
        acts = _C._drain_activities()
        mine = [a for a in acts if a[1] == engine.device.index]
        flops = sum(a[6] for a in mine if a[0] == "kernel")
        own_ns = t1 - t0
        step_ns = own_ns
        rank_loss = loss.item()
        mean_loss = rank_loss
        if stats is not None:
            slowest = torch.tensor([own_ns], dtype=torch.float64)
            torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX, group=stats)
            step_ns = float(slowest.item())
            total = torch.tensor([rank_loss], dtype=torch.float64)
            torch.distributed.all_reduce(total, group=stats)
            mean_loss = float(total.item()) / world
        compute_ns, comm_ns, exposed_ns = step_split(mine)
        rec = {
            "step": step,
            "loss": mean_loss,
            "rank_loss": rank_loss,
            "compute_ms": compute_ns / 1e6,
            "comm_ms": comm_ns / 1e6,
            "exposed_comm_ms": exposed_ns / 1e6,
            "sim_step_ms": step_ns / 1e6,
            "rank_step_ms": own_ns / 1e6,
            "tokens_per_sim_s": args.batch * args.seq * world / (step_ns * 1e-9),
            "peak_mem_mib": dev_mod.max_memory_allocated() / 2 ** 20,
            "compute_util": flops / (own_ns * 1e-9 * peak) if peak > 0 else 0.0,
            "kernel_flops": flops,
            "kernels": sum(1 for a in mine if a[0] == "kernel"),
        }
        records.append(rec)
        if rank == 0:
            print(f"{step:>4} {rec['loss']:>9.4f} {rec['sim_step_ms']:>12.3f} "
                  f"{rec['tokens_per_sim_s']:>13.0f} {rec['peak_mem_mib']:>13.1f} "
                  f"{100 * rec['compute_util']:>11.2f}% {rec['compute_ms']:>11.3f} {rec['comm_ms']:>9.3f} "
                  f"{rec['exposed_comm_ms']:>11.3f}", flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(records, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
