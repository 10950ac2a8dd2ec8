"""Trains a small transformer language model with DeepSpeed on emulated cards.

Run it under a launcher (``deepspeed`` or ``torchrun``) with DS_ACCELERATOR set to the
card (``scripts/demo.sh`` does). Rank 0 prints, per step: the loss, the simulated step
time (the slowest rank's: each rank's card keeps its own clock), tokens per simulated
second (all ranks' tokens over that time), peak device memory, compute utilization
(FLOPs rank 0's card executed over the step, against the card's peak for the training
dtype), and how rank 0's card spent the step: compute (time any kernel, memset or on-card
copy ran), communication (time any collective ran, waiting for the other ranks included)
and exposed communication (communication while no compute ran: what overlap did not hide).
The loss is the mean of all ranks' losses, the loss of the global batch. MFU is model
FLOPs utilization: the model's training FLOPs for the step's tokens (6 per parameter and
token, embedding lookups aside, plus attention's 12 x layers x width x sequence) over the
step time and the card's peak, per rank; host RSS is rank 0's resident host memory. At the
end, rank 0 lists every rank's peak device memory and host memory.

``--model llama-7b`` (or ``llama-13b``) trains a Hugging Face ``transformers`` Llama of that
architecture instead, built from its configuration alone (no weights are read): under
ZeRO-3 inside ``deepspeed.zero.Init`` (each rank's card holds only its shard from the
start), otherwise directly on the card. With ``--timing`` (the cards in timing mode: times
without arithmetic) a real-size model trains on a small host; ``--layers`` keeps the
architecture with fewer layers. A configuration that does not fit fails with the
framework's out-of-memory error where the card would run out.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
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


# Llama 2 architectures (Touvron et al., 2023), as the Hugging Face configurations give them.
LLAMA = {
    "llama-7b": dict(hidden=4096, intermediate=11008, layers=32, heads=32, vocab=32000),
    "llama-13b": dict(hidden=5120, intermediate=13824, layers=40, heads=40, vocab=32000),
}


class LlamaLM(torch.nn.Module):
    """A transformers Llama from its configuration alone; forward(x, y) is the loss."""

    def __init__(self, arch: dict, layers: int, seq: int, checkpointing: bool):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(hidden_size=arch["hidden"], intermediate_size=arch["intermediate"],
                          num_hidden_layers=layers, num_attention_heads=arch["heads"],
                          num_key_value_heads=arch["heads"], vocab_size=arch["vocab"],
                          max_position_embeddings=max(seq, 2048), use_cache=False)
        self.vocab = arch["vocab"]
        self.lm = LlamaForCausalLM(cfg)
        if checkpointing:
            if hasattr(self.lm, "activation_checkpointing_enable"):   # transformers >= 5.20
                self.lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def forward(self, x, y):
        logits = self.lm(input_ids=x).logits.float()
        return torch.nn.functional.cross_entropy(logits.view(-1, self.vocab), y.view(-1))


def model_flops_per_token(model: torch.nn.Module, layers: int, width: int, seq: int) -> float:
    """Training FLOPs per token: 6 per parameter that multiplies (embedding tables, which are
    looked up, aside) plus attention's scores and values, 12 x layers x width x sequence."""
    lookups = sum(m.weight.ds_numel if hasattr(m.weight, "ds_numel") else m.weight.numel()
                  for m in model.modules() if isinstance(m, torch.nn.Embedding))
    lookups += sum(p.numel() for n, p in model.named_parameters(recurse=False))   # TinyLM.pos
    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    return 6.0 * (params - lookups) + 12.0 * layers * width * seq


def host_rss_mib() -> float:
    """This process's resident host memory now, MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default=os.environ.get("DS_ACCELERATOR", "mlu"), choices=["mlu", "supa"])
    ap.add_argument("--model", default="tiny", choices=["tiny", *LLAMA],
                    help="tiny: the small demo transformer; llama-*: a transformers Llama of that size")
    ap.add_argument("--timing", action="store_true",
                    help="run the cards in timing mode (CARDSIM_EXECUTION=timing): simulated times "
                         "and memory as in full mode, no arithmetic, device memory never touched")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--zero-stage", type=int, default=3)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--batch", type=int, default=None, help="sequences per rank per step (tiny: 8, llama: 1)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (tiny: 64, llama: 2048)")
    ap.add_argument("--dim", type=int, default=128, help="tiny: model width")
    ap.add_argument("--layers", type=int, default=None, help="layers (tiny: 2, llama: the architecture's)")
    ap.add_argument("--vocab", type=int, default=512, help="tiny: vocabulary")
    ap.add_argument("--checkpointing", action="store_true", help="llama: activation checkpointing")
    ap.add_argument("--json", help="write the per-step records here (rank 0)")
    ap.add_argument("--local_rank", type=int, default=None)   # the deepspeed launcher passes it
    args = ap.parse_args(argv)
    llama = LLAMA.get(args.model)
    if args.batch is None:
        args.batch = 1 if llama else 8
    if args.seq is None:
        args.seq = 2048 if llama else 64
    if args.layers is None:
        args.layers = llama["layers"] if llama else 2
    if llama:
        args.vocab = llama["vocab"]
    width = llama["hidden"] if llama else args.dim

    os.environ.setdefault("DS_ACCELERATOR", args.card)
    # DeepSpeed 0.19.8 still calls the collectives torch now calls deprecated.
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    importlib.import_module(f"torch_{args.card}")
    dev_mod = getattr(torch, args.card)
    if args.timing:
        dev_mod.set_execution_mode("timing")
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    cfg = {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "weight_decay": 0.0}},
        "zero_optimization": {"stage": args.zero_stage, "reduce_bucket_size": 2_000_000,
                              "allgather_bucket_size": 2_000_000,
                              "stage3_prefetch_bucket_size": 2_000_000},
        "steps_per_print": 10 ** 9,
    }
    if llama:
        # The sizes Hugging Face's Trainer derives ("auto") from the model's width.
        cfg["zero_optimization"].update(reduce_bucket_size=width * width, allgather_bucket_size=width * width,
                                        stage3_prefetch_bucket_size=int(0.9 * width * width),
                                        stage3_param_persistence_threshold=10 * width)
    if args.precision == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif args.precision == "fp16":
        cfg["fp16"] = {"enabled": True, "initial_scale_power": 12}
    acc = get_accelerator()

    torch.manual_seed(0)
    if not llama:
        model = TinyLM(args.vocab, args.dim, args.layers, 4, args.seq)
    else:
        # Imported before zero.Init patches tensor construction (transformers imports torch._dynamo).
        import transformers  # noqa: F401
        from transformers import LlamaForCausalLM  # noqa: F401
        deepspeed.init_distributed(dist_backend=acc.communication_backend_name())
        local = int(os.environ.get("LOCAL_RANK", "0"))
        acc.set_device(local)
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
        if args.zero_stage == 3:
            # Each parameter is partitioned as its module is built: no rank, and not the
            # host, ever holds the whole model.
            with deepspeed.zero.Init(config_dict_or_path=cfg, dtype=dtype):
                model = LlamaLM(llama, args.layers, args.seq, args.checkpointing)
        else:
            # Built on the card in the training dtype, as from_pretrained(torch_dtype=...) does.
            previous = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                with torch.device(acc.device_name(local)):
                    model = LlamaLM(llama, args.layers, args.seq, args.checkpointing)
            finally:
                torch.set_default_dtype(previous)
    flops_per_token = model_flops_per_token(model, args.layers, width, args.seq)
    n_params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    rank, world = engine.global_rank, engine.world_size
    props = dev_mod.get_device_properties(engine.device)
    peak = {"fp32": props.peak_fp32_flops, "bf16": props.peak_bf16_flops,
            "fp16": props.peak_fp16_flops}[args.precision]
    from cardsim_torch import _C
    # Step statistics travel over a host-only group, so gathering them costs no card time.
    stats = torch.distributed.new_group(backend="gloo") if world > 1 else None

    if rank == 0:
        mode = f", {dev_mod.execution_mode()} mode" if dev_mod.execution_mode() != "full" else ""
        print(f"DeepSpeed {deepspeed.__version__} on {world} emulated {props.name} "
              f"({type(acc).__name__}, backend {acc.communication_backend_name()}), "
              f"ZeRO stage {args.zero_stage}, {args.precision}, "
              f"{args.model if llama else 'tiny LM'} ({n_params / 1e6:.2f} M parameters, {args.layers} layers), "
              f"{args.batch} x {args.seq} tokens per rank{mode}")
        print(f"{'step':>4} {'loss':>9} {'sim step ms':>12} {'tokens/sim s':>13} "
              f"{'peak mem MiB':>13} {'compute util':>12} {'compute ms':>11} {'comm ms':>9} "
              f"{'exposed ms':>11} {'MFU':>7} {'host RSS MiB':>13}")
    records = []
    _C._set_activity_recording(True)
    for step, (x, y) in enumerate(batches(args.steps, args.batch, args.seq, args.vocab, rank, world)):
        dev_mod.synchronize()
        _C._drain_activities()
        t0 = dev_mod.host_time_ns()
        wall0 = time.perf_counter()
        x, y = x.to(engine.device), y.to(engine.device)
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        dev_mod.synchronize()
        t1 = dev_mod.host_time_ns()
        wall_s = time.perf_counter() - wall0
        acts = _C._drain_activities()
        mine = [a for a in acts if a[1] == engine.device.index]
        flops = sum(a[6] for a in mine if a[0] == "kernel")
        own_ns = t1 - t0
        step_ns = own_ns
        rank_loss = loss.item()
        mean_loss = rank_loss
        mine_stats = [dev_mod.max_memory_allocated() / 2 ** 20, host_rss_mib(), wall_s]
        rank_stats = [mine_stats]
        if stats is not None:
            slowest = torch.tensor([own_ns], dtype=torch.float64)
            torch.distributed.all_reduce(slowest, op=torch.distributed.ReduceOp.MAX, group=stats)
            step_ns = float(slowest.item())
            total = torch.tensor([rank_loss], dtype=torch.float64)
            torch.distributed.all_reduce(total, group=stats)
            mean_loss = float(total.item()) / world
            gathered = [torch.zeros(3, dtype=torch.float64) for _ in range(world)]
            torch.distributed.all_gather(gathered, torch.tensor(mine_stats, dtype=torch.float64), group=stats)
            rank_stats = [g.tolist() for g in gathered]
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
            "peak_mem_mib": mine_stats[0],
            "compute_util": flops / (own_ns * 1e-9 * peak) if peak > 0 else 0.0,
            "mfu": flops_per_token * args.batch * args.seq / (step_ns * 1e-9 * peak) if peak > 0 else 0.0,
            "host_rss_mib": mine_stats[1],
            "rank_peak_mem_mib": [r[0] for r in rank_stats],
            "rank_host_rss_mib": [r[1] for r in rank_stats],
            "kernel_flops": flops,
            "model_flops": flops_per_token * args.batch * args.seq,
            "kernels": sum(1 for a in mine if a[0] == "kernel"),
            "wall_step_s": wall_s,
            "wall_step_s_max": max(r[2] for r in rank_stats),
        }
        records.append(rec)
        if rank == 0:
            print(f"{step:>4} {rec['loss']:>9.4f} {rec['sim_step_ms']:>12.3f} "
                  f"{rec['tokens_per_sim_s']:>13.0f} {rec['peak_mem_mib']:>13.1f} "
                  f"{100 * rec['compute_util']:>11.2f}% {rec['compute_ms']:>11.3f} {rec['comm_ms']:>9.3f} "
                  f"{rec['exposed_comm_ms']:>11.3f} {100 * rec['mfu']:>6.2f}% {rec['host_rss_mib']:>13.1f}",
                  flush=True)
    if rank == 0 and records:
        last = records[-1]
        total_mib = props.total_memory / 2 ** 20
        print(f"{'rank':>4} {'peak mem MiB':>13} {'of MiB':>9} {'host RSS MiB':>13}")
        for r, (mem, rss) in enumerate(zip(last["rank_peak_mem_mib"], last["rank_host_rss_mib"])):
            print(f"{r:>4} {mem:>13.1f} {total_mib:>9.0f} {rss:>13.1f}")
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(records, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
