"""torch_mlu / torch_supa on the native backend, over the stand-in vendor runtimes that the
build makes (build/tests/native_stubs: libcnrt.so under a NEUWARE_HOME layout, libsupa.so
under a BIREN_HOME one; their memory is host memory). A training step runs through the
vendor's memory, copy, queue and notifier calls and matches the same step on the CPU; the
stub's call log shows the work went through the vendor library."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
STUBS = ROOT / "build" / "tests" / "native_stubs"

SCRIPT = textwrap.dedent(r'''
    import ctypes, json, os, sys
    import torch
    dev = sys.argv[1]
    lib = sys.argv[2]
    if dev == "mlu":
        import torch_mlu
    else:
        import torch_supa
    mod = getattr(torch, dev)
    props = mod.get_device_properties(0)
    out = {"count": mod.device_count(), "backend": props.backend, "name": props.name,
           "total_memory": props.total_memory}

    def step(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)   # built before .to(), as DeepSpeed tests do
        model.to(device)
        x = torch.randn(8, 16).to(device)
        y = torch.randint(0, 4, (8,)).to(device)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]

    ref_losses, ref_params = step("cpu")
    losses, params = step(dev)
    out["losses"] = losses
    out["ref_losses"] = ref_losses
    out["max_param_diff"] = max((a - b).abs().max().item() for a, b in zip(params, ref_params))

    s = mod.Stream()
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    with mod.stream(s):
        start.record()
        z = torch.ones(1024, device=dev) * 3
        end.record()
    end.synchronize()
    out["elapsed_ms"] = start.elapsed_time(end)
    out["z_sum"] = z.sum().item()
    out["memory_allocated"] = mod.memory_allocated()
    stub = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD if hasattr(os, "RTLD_NOLOAD") else 0)
    stub.cardsimStubLog.restype = ctypes.c_char_p
    out["log"] = stub.cardsimStubLog().decode()
    print("RESULT " + json.dumps(out))
''')


def _run(card, env_extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARDSIM_", "NEUWARE_", "BIREN_", "MLU_", "SUPA_"))}
    env.update(env_extra)
    lib = (STUBS / "neuware/lib64/libcnrt.so") if card == "mlu" else (STUBS / "biren/brumd/libsupa.so")
    assert lib.exists(), f"{lib} is missing: the build makes the stub runtimes (scripts/setup.sh)"
    r = subprocess.run([sys.executable, "-c", SCRIPT, card, str(lib)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), r.stderr


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_training_step_on_the_stub_vendor_runtime(card, tmp_path):
    env = {"CARDSIM_BACKEND": "native", "CARDSIM_STUB_DEVICES": "2", "CARDSIM_TRACE": str(tmp_path / "trace")}
    if card == "mlu":
        env["NEUWARE_HOME"] = str(STUBS / "neuware")
    else:
        env["BIREN_HOME"] = str(STUBS / "biren")
    out, _ = _run(card, env)
    runtime = "CNRT" if card == "mlu" else "SUPA runtime"
    assert out["backend"].startswith(f"native ({runtime} "), out["backend"]
    assert out["count"] == 2                       # the runtime's devices, not the preset's
    assert out["total_memory"] == 16 << 30
    assert out["losses"] == pytest.approx(out["ref_losses"], rel=1e-5, abs=1e-6)
    assert out["max_param_diff"] < 1e-5
    assert out["z_sum"] == 3 * 1024
    assert out["elapsed_ms"] >= 0
    assert out["memory_allocated"] > 0
    log = out["log"]
    prefix = "cnrt" if card == "mlu" else "supa"
    for call in (["cnrtMalloc(", "cnrtMemcpyAsync(", "cnrtQueueCreateWithPriority(", "cnrtPlaceNotifier(",
                  "cnrtNotifierElapsedTime("] if card == "mlu" else
                 ["supaMalloc(", "supaMemcpyAsync(", "supaStreamCreateWithPriority(", "supaEventRecord(",
                  "supaEventElapsedTime("]):
        assert call in log, f"{call} never reached the {prefix} stub:\n{log[-2000:]}"
    # The run was recorded, and the trace says which backend ran it.
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "cardsim"), "info", str(tmp_path / "trace"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["backend"] == "native", info
    assert info["preset"] == ("mlu370-x8" if card == "mlu" else "br100") and info["devices"] == 2, info
    assert info["records"]["alloc"] > 0 and info["records"]["kernel_launch"] > 10, info
    # ... and replays on the preset it stands for (a what-if from a real card's run).
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "cardsim"), "replay", str(tmp_path / "trace")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_auto_backend_falls_back_to_the_emulator_with_a_message():
    env = {"CARDSIM_BACKEND": "auto", "NEUWARE_HOME": str(STUBS / "neuware-incomplete")}
    script = ("import torch, torch_mlu; p = torch.mlu.get_device_properties(0); "
              "print('RESULT', p.backend, torch.mlu.device_count())")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={**{k: v for k, v in os.environ.items() if not k.startswith(("CARDSIM_", "NEUWARE_"))}, **env})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RESULT sim 8" in r.stdout
    assert "CARDSIM_BACKEND=auto" in r.stderr and "lacks the symbol cnrtQueueWaitNotifier" in r.stderr, r.stderr


def test_cli_devices_shows_the_backend():
    cardsim = ROOT / ".venv" / "bin" / "cardsim"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CARDSIM_", "NEUWARE_"))}
    r = subprocess.run([str(cardsim), "devices", "--json", "--backend", "native"], capture_output=True, text=True,
                       timeout=120, env={**base, "NEUWARE_HOME": str(STUBS / "neuware"), "CARDSIM_STUB_DEVICES": "3"})
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["backend"] == "native" and info["backend_detail"].startswith("native (CNRT 6.14.1, ")
    assert [d["name"] for d in info["devices"]] == ["MLU370-X8 (stub)"] * 3
    r = subprocess.run([str(cardsim), "devices", "--preset", "br100", "--devices", "2"], capture_output=True,
                       text=True, timeout=120, env=base)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "backend: sim"
    assert lines[1].split()[:2] == ["device", "name"] and len(lines) == 4
    assert lines[2].split()[:2] == ["0", "BR100"]
    r = subprocess.run([str(cardsim), "devices", "--backend", "native"], capture_output=True, text=True,
                       timeout=120, env={**base, "NEUWARE_HOME": "/nonexistent"})
    assert r.returncode == 1 and "/nonexistent/lib64/libcnrt.so" in r.stderr
