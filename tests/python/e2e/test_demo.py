"""scripts/demo.sh, the main job: DeepSpeed trains a small LM on two emulated cards and
rank 0 prints a per-step table (loss, simulated step time, tokens per simulated second,
peak device memory, compute utilization)."""
import json
import os
import re
import signal
import subprocess

import pytest

from conftest import run_group


BF16_PEAK = {"mlu370-x8": None}   # filled from the device properties below


@pytest.fixture(autouse=True, scope="module")
def _bf16_peak(root):
    import subprocess, sys
    code = ("import torch, torch_mlu; print(torch.mlu.get_device_properties(0).peak_bf16_flops)")
    out = subprocess.run([str(root / ".venv" / "bin" / "python"), "-c", code], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items()
                                         if not k.startswith("CARDSIM_") and k != "MLU_VISIBLE_DEVICES"})
    assert out.returncode == 0, out.stderr
    BF16_PEAK["mlu370-x8"] = float(out.stdout.strip())


HEADER = ["step", "loss", "sim step ms", "tokens/sim s", "peak mem MiB", "compute util", "compute ms",
          "comm ms", "exposed ms", "MFU", "host RSS MiB"]
ROW = re.compile(r"^\s*(\d+)\s+(-?[0-9.]+)\s+([0-9.]+)\s+([0-9]+)\s+([0-9.]+)\s+([0-9.]+)%"
                 r"\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)\s*$")


def _demo(root, *args, timeout=600):
    env = dict(os.environ)
    for k in ("CARDSIM_PRESET", "CARDSIM_DEVICES", "CARDSIM_CONFIG", "MLU_VISIBLE_DEVICES",
              "SUPA_VISIBLE_DEVICES", "DS_ACCELERATOR", "RANK", "WORLD_SIZE", "LOCAL_RANK",
              "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    proc = run_group([str(root / "scripts" / "demo.sh"), *args], timeout=timeout, env=env, cwd=str(root))
    assert proc.returncode == 0, (f"demo.sh {' '.join(args)}: rc={proc.returncode}\n--- stdout\n"
                                  f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}")
    return proc.stdout


def _table(out: str):
    lines = out.splitlines()
    heads = [i for i, ln in enumerate(lines) if all(h in ln for h in HEADER)]
    assert len(heads) == 1, f"expected one table header with columns {HEADER}:\n{out[-3000:]}"
    rows = []
    for ln in lines[heads[0] + 1:]:
        m = ROW.match(ln)
        if m:
            step, loss, ms, tok, mem, util, comp, comm, exposed, mfu, rss = m.groups()
            rows.append(dict(step=int(step), loss=float(loss), sim_step_ms=float(ms),
                             tokens_per_sim_s=float(tok), peak_mem_mib=float(mem),
                             compute_util_pct=float(util), compute_ms=float(comp), comm_ms=float(comm),
                             exposed_ms=float(exposed), mfu_pct=float(mfu), host_rss_mib=float(rss)))
    return lines[heads[0] - 1] if heads[0] > 0 else "", rows


def _check_rows(rows, steps):
    assert [r["step"] for r in rows] == list(range(steps)), rows
    for r in rows:
        assert r["loss"] > 0 and r["sim_step_ms"] > 0 and r["tokens_per_sim_s"] > 0, r
        assert r["peak_mem_mib"] > 0 and 0 < r["compute_util_pct"] <= 100, r
        # rank 0's card: compute and the communication it did not hide fit in the step
        assert 0 < r["compute_ms"] and 0 < r["comm_ms"] and 0 <= r["exposed_ms"] <= r["comm_ms"] + 1e-3, r
        assert r["compute_ms"] + r["exposed_ms"] <= r["sim_step_ms"] + 2e-3, r
        assert 0 < r["mfu_pct"] <= r["compute_util_pct"] * 1.2 and r["host_rss_mib"] > 100, r


def _demo_flops_per_rank_step(batch=8, seq=64, dim=128, layers=2, vocab=512):
    """Training FLOPs of train_lm.py's model per rank and step, in closed form: the matmuls
    (QKV and output projections 4 d^2, feed-forward 8 d^2, attention scores and values
    2 S d, the head d V, per token and multiply-add = 2 FLOPs) forward, twice that backward."""
    per_token = layers * (2 * (4 * dim * dim + 8 * dim * dim) + 2 * 2 * seq * dim) + 2 * dim * vocab
    return 3 * per_token * batch * seq


def _demo_kernel_flops_per_rank_step(batch=8, seq=64, dim=128, layers=2, vocab=512):
    """What the card executes of them: the same matmuls, but attention runs fused and causal
    (scores and values over the S (S + 1) / 2 unmasked pairs only, 4 d FLOPs each, and a
    backward of 2.5x its forward: 7 d S (S + 1) per layer and sequence) where the model's
    count takes 12 d S^2, full attention, as MFU's numerator does."""
    attention_counted = layers * 12 * dim * seq * seq * batch
    attention_run = layers * 7 * dim * seq * (seq + 1) * batch
    return _demo_flops_per_rank_step(batch, seq, dim, layers, vocab) - attention_counted + attention_run


def _launch_overhead_s(root, preset="mlu370-x8"):
    text = (root / "simulator" / "presets" / f"{preset}.textproto").read_text()
    block = text[text.index("launch_overhead {"):]
    m = re.search(r'value:\s*"([0-9.]+)\s*(s|ms|us|ns)"', block)
    return float(m.group(1)) * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[m.group(2)]


def test_demo_mlu_table_and_loss_falls(root, tmp_path):
    # covers `demo.sh --steps 3` (the table) and the loss falling over 6 steps
    records_path = tmp_path / "records.json"
    out = _demo(root, "--steps", "6", "--json", str(records_path))
    banner, rows = _table(out)
    assert "2 emulated MLU370-X8" in banner and "MLU_Accelerator" in banner and "cncl" in banner, banner
    _check_rows(rows, 6)
    losses = [r["loss"] for r in rows]
    assert losses[-1] < losses[0] - 0.1, losses
    assert sum(b < a for a, b in zip(losses, losses[1:])) >= 4, losses
    # tokens per simulated second is the step's tokens over its simulated time (2 ranks,
    # train_lm.py's defaults: 8 sequences of 64 tokens per rank)
    for r in rows:
        assert r["tokens_per_sim_s"] == pytest.approx(2 * 8 * 64 / (r["sim_step_ms"] / 1e3), rel=2e-3)
    records = json.loads(records_path.read_text())
    launch = _launch_overhead_s(root)
    want_flops = _demo_flops_per_rank_step()
    run_flops = _demo_kernel_flops_per_rank_step()
    for rec in records:
        # the job's step is its slowest rank's, and no rank can beat its own launches
        assert rec["sim_step_ms"] >= rec["rank_step_ms"] > 0, rec
        assert rec["rank_step_ms"] * 1e-3 >= rec["kernels"] * launch, rec
        # the card executed the model's matmul FLOPs (attention fused and causal) plus a
        # little elementwise work
        assert run_flops <= rec["kernel_flops"] <= 1.1 * run_flops, (rec["kernel_flops"], run_flops)
        # the model's FLOPs (MFU's numerator) are the same matmuls, counted from the parameters
        assert rec["model_flops"] == pytest.approx(want_flops, rel=0.02), (rec["model_flops"], want_flops)
        assert rec["mfu"] == pytest.approx(rec["model_flops"] / (rec["sim_step_ms"] * 1e-3 * BF16_PEAK["mlu370-x8"]),
                                           rel=1e-6), rec
        util = rec["kernel_flops"] / (rec["rank_step_ms"] * 1e-3 * BF16_PEAK["mlu370-x8"])
        assert rec["compute_util"] == pytest.approx(util, rel=1e-6), rec


def test_demo_supa(root):
    out = _demo(root, "--card", "supa", "--steps", "2")
    banner, rows = _table(out)
    assert "2 emulated BR100" in banner and "SUPA_Accelerator" in banner and "bccl" in banner, banner
    _check_rows(rows, 2)


REFERENCE = r'''
import json, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "accelerators", "examples"))
import torch
from train_lm import TinyLM, batches
cards, steps = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = TinyLM(512, 128, 2, 4, 64)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
out = []
for x, y in batches(steps, 8 * cards, 64, 512, 0, 1):   # the global batch of all ranks
    opt.zero_grad()
    loss = model(x, y)
    loss.backward()
    opt.step()
    out.append(loss.item())
print(json.dumps(out))
'''


@pytest.mark.parametrize("card,name", [("mlu", "MLU370-X8"), ("supa", "BR100")])
def test_demo_zero3_on_8_cards_matches_the_cpu_reference(root, py, tmp_path, card, name):
    # ZeRO-3 in fp32 on 8 ranks sharing one fabric: the mean of the ranks' losses is the
    # global batch's loss, which plain PyTorch computes on the CPU in one process.
    steps = 3
    records_path = tmp_path / "records.json"
    out = _demo(root, "--card", card, "--cards", "8", "--steps", str(steps), "--precision", "fp32",
                "--zero-stage", "3", "--json", str(records_path), timeout=900)
    banner, rows = _table(out)
    assert f"8 emulated {name}" in banner and "ZeRO stage 3" in banner, banner
    _check_rows(rows, steps)
    ref = py(REFERENCE, args=("8", str(steps)))
    assert ref.returncode == 0, ref.stderr
    want = json.loads(ref.stdout)
    got = [r["loss"] for r in json.loads(records_path.read_text())]
    assert got == pytest.approx(want, rel=1e-4), (got, want)
    for r in rows:    # eight ranks reduce and gather over the fabric every step
        assert r["comm_ms"] > 0.01, r


def test_demo_rejects_bad_card_counts(root):
    for bad in ("0", "9", "two"):
        proc = run_group([str(root / "scripts" / "demo.sh"), "--cards", bad], timeout=600, cwd=str(root))
        assert proc.returncode == 2 and "--cards" in proc.stderr, (bad, proc.returncode, proc.stderr[-2000:])


def test_demo_rejects_unknown_card(root):
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    proc = run_group([str(root / "scripts" / "demo.sh"), "--card", "tpu"], timeout=600, env=env,
                     cwd=str(root))
    assert proc.returncode == 2 and "tpu" in proc.stderr, (proc.returncode, proc.stderr[-2000:])
