"""scripts/demo.sh, the main job: DeepSpeed trains a small LM on two emulated cards and
rank 0 prints a per-step table (loss, simulated step time, tokens per simulated second,
peak device memory, compute utilization)."""
import os
import re
import signal
import subprocess

import pytest

run_group = None   # conftest's run_group, set by the fixture below


@pytest.fixture(autouse=True)
def _group_runner(group_runner):
    global run_group
    run_group = group_runner




HEADER = ["step", "loss", "sim step ms", "tokens/sim s", "peak mem MiB", "compute util"]
ROW = re.compile(r"^\s*(\d+)\s+(-?[0-9.]+)\s+([0-9.]+)\s+([0-9]+)\s+([0-9.]+)\s+([0-9.]+)%\s*$")


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
            step, loss, ms, tok, mem, util = m.groups()
            rows.append(dict(step=int(step), loss=float(loss), sim_step_ms=float(ms),
                             tokens_per_sim_s=float(tok), peak_mem_mib=float(mem),
                             compute_util_pct=float(util)))
    return lines[heads[0] - 1] if heads[0] > 0 else "", rows


def _check_rows(rows, steps):
    assert [r["step"] for r in rows] == list(range(steps)), rows
    for r in rows:
        assert r["loss"] > 0 and r["sim_step_ms"] > 0 and r["tokens_per_sim_s"] > 0, r
        assert r["peak_mem_mib"] > 0 and 0 < r["compute_util_pct"] <= 100, r


def test_demo_mlu_table_and_loss_falls(root):
    # covers `demo.sh --steps 3` (the table) and the loss falling over 6 steps
    out = _demo(root, "--steps", "6")
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


def test_demo_supa(root):
    out = _demo(root, "--card", "supa", "--steps", "2")
    banner, rows = _table(out)
    assert "2 emulated BR100" in banner and "SUPA_Accelerator" in banner and "bccl" in banner, banner
    _check_rows(rows, 2)


def test_demo_rejects_unknown_card(root):
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    proc = run_group([str(root / "scripts" / "demo.sh"), "--card", "tpu"], timeout=600, env=env,
                     cwd=str(root))
    assert proc.returncode == 2 and "tpu" in proc.stderr, (proc.returncode, proc.stderr[-2000:])
