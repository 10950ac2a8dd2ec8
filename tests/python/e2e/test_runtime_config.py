"""Runtime configuration, end to end: personalities, presets, CARDSIM_* variables and the
visible-devices variables, each in a fresh process (the runtime reads its configuration
once, at the first device query)."""
import json
import pathlib
import textwrap

import pytest

from conftest import free_port

PRESETS = sorted(p.stem for p in
                 (pathlib.Path(__file__).resolve().parents[3] / "simulator" / "presets").glob("*.textproto"))


def _result(proc):
    """The JSON a child printed on its last `RESULT ` line (fails with the child's output)."""
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    pytest.fail(f"child printed no RESULT line (rc={proc.returncode})\n"
                f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}")


def _ok(proc):
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return _result(proc)


# Runs `body` after importing the card; `body` sets `res` (a dict) to report.
def _prog(card: str, body: str) -> str:
    return textwrap.dedent(f"""\
        import json, os, sys, torch
        import torch_{card}
        mod = torch.{card}
        res = {{}}
        """) + textwrap.dedent(body) + '\nprint("RESULT " + json.dumps(res))\n'


# Calls `expr` expecting an exception; reports its type and message.
def _prog_error(card: str, before: str, expr: str) -> str:
    return _prog(card, before + textwrap.dedent(f"""
        try:
            value = {expr}
        except Exception as e:
            res["type"] = type(e).__name__
            res["msg"] = str(e)
        else:
            res["type"] = None
            res["value"] = repr(value)
        """))


# ---- personalities -------------------------------------------------------------------

@pytest.mark.parametrize("first,second", [("mlu", "supa"), ("supa", "mlu")])
def test_second_personality_import_fails_naming_both(py, first, second):
    code = _prog(first, f"""
        try:
            import torch_{second}
        except ImportError as e:
            res["msg"] = str(e)
        else:
            res["msg"] = None
        # the first personality stays usable
        res["sum"] = torch.ones(4, device="{first}:0").add(1).sum().item()
        res["has_second_module"] = hasattr(torch, "{second}")
        """)
    res = _ok(py(code))
    assert res["msg"] is not None, f"import torch_{second} after torch_{first} did not fail"
    assert f"torch_{first}" in res["msg"] and f"torch_{second}" in res["msg"], res["msg"]
    assert res["sum"] == 8.0
    assert res["has_second_module"] is False


def test_defaults_preset_and_all_devices_visible(py):
    # no CARDSIM_* and no MLU_VISIBLE_DEVICES: the default preset, 8 devices, all usable
    code = _prog("mlu", """
        res["env"] = os.environ.get("MLU_VISIBLE_DEVICES")
        p = mod.get_device_properties(0)
        res.update(count=mod.device_count(), name=p.name, preset=p.preset, total=p.total_memory)
        res["sum"] = torch.ones(2, device="mlu:7").sum().item()
        """)
    res = _ok(py(code))
    assert res == {"env": None, "count": 8, "name": "MLU370-X8", "preset": "mlu370-x8",
                   "total": 23374 << 20, "sum": 2.0}
    code = _prog("supa", """
        p = mod.get_device_properties(0)
        res.update(count=mod.device_count(), name=p.name, preset=p.preset)
        """)
    assert _ok(py(code)) == {"count": 8, "name": "BR100", "preset": "br100"}


def test_preset_br100_on_mlu(py):
    code = _prog("mlu", """
        p = mod.get_device_properties(0)
        res.update(name=p.name, preset=p.preset, total=p.total_memory, bw=p.memory_bandwidth,
                   fp32=p.peak_fp32_flops)
        """)
    res = _ok(py(code, env={"CARDSIM_PRESET": "br100"}))
    assert res["name"] == "BR100" and res["preset"] == "br100"
    assert res["total"] == 65536 << 20   # 64 GiB of HBM2E, in MiB as the tools count
    assert res["bw"] == pytest.approx(1.64e12)
    assert res["fp32"] == pytest.approx(256e12)


def test_bad_preset_fails_at_first_device_query(py):
    code = _prog("mlu", """
        res["imported"] = True          # the import itself must not fail
        for attempt in ("first", "second"):
            try:
                mod.device_count()
            except Exception as e:
                res[attempt] = [type(e).__name__, str(e)]
            else:
                res[attempt] = None
        res["is_available"] = mod.is_available()
        """)
    res = _ok(py(code, env={"CARDSIM_PRESET": "no-such-card"}))
    assert res["imported"]
    for attempt in ("first", "second"):
        assert res[attempt] is not None, "device_count() with an unknown preset did not fail"
        msg = res[attempt][1]
        assert "no-such-card" in msg, msg
        for valid in PRESETS:
            assert valid in msg, f"valid preset {valid!r} not listed in: {msg}"
    assert res["is_available"] is False


@pytest.mark.parametrize("card,count", [("mlu", 2), ("supa", 3)])
def test_cardsim_devices(py, card, count):
    code = _prog(card, f"""
        res["count"] = mod.device_count()
        t = torch.arange(4.0, device="{card}:{count - 1}")
        res["sum"] = (t * 2).sum().item()
        try:
            torch.ones(1, device="{card}:{count}")
        except Exception as e:
            res["beyond"] = type(e).__name__
        else:
            res["beyond"] = None
        """)
    res = _ok(py(code, env={"CARDSIM_DEVICES": str(count)}))
    assert res["count"] == count
    assert res["sum"] == 12.0
    assert res["beyond"] is not None, f"a tensor on {card}:{count} was created with {count} devices"


def test_cardsim_devices_invalid(py):
    code = _prog_error("mlu", "", "mod.device_count()")
    res = _ok(py(code, env={"CARDSIM_DEVICES": "zero"}))
    assert res["type"] is not None, f"CARDSIM_DEVICES=zero accepted: {res}"
    assert "CARDSIM_DEVICES" in res["msg"] and "zero" in res["msg"], res["msg"]


# ---- CARDSIM_CONFIG ------------------------------------------------------------------

@pytest.mark.parametrize("line,key", [
    ("memory.bandwdth = 600 GB/s", "memory.bandwdth"),
    ("compute.peak.fp33 = 1 TFLOPS", "compute.peak.fp33"),
])
def test_config_bad_key_names_key_path_and_file(py, tmp_path, line, key):
    cfg = tmp_path / "overrides.cfg"
    cfg.write_text("# a comment\nmemory.latency = 700 ns\n" + line + "\n")
    res = _ok(py(_prog_error("mlu", "", "mod.device_count()"), env={"CARDSIM_CONFIG": str(cfg)}))
    assert res["type"] is not None, f"a config with the bad key {key!r} was accepted"
    assert key in res["msg"], res["msg"]
    assert str(cfg) in res["msg"], res["msg"]


def test_config_bad_value_names_key_and_file(py, tmp_path):
    cfg = tmp_path / "overrides.cfg"
    cfg.write_text("memory.bandwidth = fast\n")
    res = _ok(py(_prog_error("mlu", "", "mod.device_count()"), env={"CARDSIM_CONFIG": str(cfg)}))
    assert res["type"] is not None
    assert "memory.bandwidth" in res["msg"] and str(cfg) in res["msg"] and "fast" in res["msg"], res["msg"]


_ADD_PROGRAM = """
    n = 16 << 20                       # 64 MiB per operand: memory bound
    a = torch.ones(n, device="mlu:0"); b = torch.ones(n, device="mlu:0")
    c = a + b                          # warm up the allocator
    mod.synchronize()
    s = mod.Event(enable_timing=True); e = mod.Event(enable_timing=True)
    s.record(); c = a + b; e.record(); e.synchronize()
    p = mod.get_device_properties(0)
    res.update(ms=s.elapsed_time(e), bw=p.memory_bandwidth, ok=bool((c == 2).all().item()))
    """


def test_config_bandwidth_override_speeds_up_memory_bound_kernel(py, tmp_path):
    base = _ok(py(_prog("mlu", _ADD_PROGRAM)))
    cfg = tmp_path / "fast-memory.cfg"
    cfg.write_text(f"memory.bandwidth = {2 * base['bw'] / 1e9} GB/s\n")
    fast = _ok(py(_prog("mlu", _ADD_PROGRAM), env={"CARDSIM_CONFIG": str(cfg)}))
    assert base["ok"] and fast["ok"]
    assert fast["bw"] == pytest.approx(2 * base["bw"])
    assert fast["ms"] < base["ms"]
    # a memory-bound kernel: twice the bandwidth, about half the time (fixed latencies aside)
    assert fast["ms"] == pytest.approx(base["ms"] / 2, rel=0.05)
    # and about bytes / bandwidth: read a and b, write c
    nbytes = 3 * (16 << 20) * 4
    assert base["ms"] == pytest.approx(nbytes / base["bw"] * 1e3, rel=0.05)


# ---- visible devices ---------------------------------------------------------------

def test_visible_devices_renumbers(py):
    code = _prog("mlu", """
        res["count"] = mod.device_count()
        p = mod.get_device_properties(1)
        res["name"] = p.name
        res["total"] = p.total_memory
        t = torch.full((1024,), 3.0, device="mlu:1")
        res["device"] = str(t.device)
        res["sum"] = (t + 1).sum().item()
        res["alloc"] = [mod.memory_allocated(0), mod.memory_allocated(1)]
        for bad in (2, 5):
            try:
                torch.empty(1, device=f"mlu:{bad}")
            except Exception as e:
                res[f"bad{bad}"] = str(e)
            else:
                res[f"bad{bad}"] = None
        """)
    res = _ok(py(code, env={"MLU_VISIBLE_DEVICES": "3,5"}))
    assert res["count"] == 2
    assert res["name"] == "MLU370-X8" and res["total"] == 23374 << 20
    assert res["device"] == "mlu:1"
    assert res["sum"] == 4096.0
    assert res["alloc"][0] == 0 and res["alloc"][1] >= 4096
    assert res["bad2"] is not None and res["bad5"] is not None


def test_supa_visible_devices_renumbers(py):
    code = _prog("supa", """
        res["count"] = mod.device_count()
        res["sum"] = torch.ones(8, device="supa:2").sum().item()
        """)
    assert _ok(py(code, env={"SUPA_VISIBLE_DEVICES": "7,0,4"})) == {"count": 3, "sum": 8.0}


@pytest.mark.parametrize("value", ["9", "x", "1,1"])
def test_visible_devices_invalid_names_variable_and_value(py, value):
    res = _ok(py(_prog_error("mlu", "", "mod.device_count()"), env={"MLU_VISIBLE_DEVICES": value}))
    assert res["type"] is not None, f"MLU_VISIBLE_DEVICES={value!r} accepted: {res}"
    assert "MLU_VISIBLE_DEVICES" in res["msg"] and value in res["msg"], res["msg"]


def test_visible_devices_read_lazily(py):
    # set after the import, before the first device query: honoured
    code = _prog("mlu", """
        os.environ["MLU_VISIBLE_DEVICES"] = "3,5"
        res["count"] = mod.device_count()
        res["sum"] = torch.ones(2, device="mlu:1").sum().item()
        os.environ["MLU_VISIBLE_DEVICES"] = "1"     # later changes do not renumber devices
        res["count_after"] = mod.device_count()
        """)
    assert _ok(py(code)) == {"count": 2, "sum": 2.0, "count_after": 2}


# ---- entry points that reach the runtime before any device use -----------------------

@pytest.mark.parametrize("first", ["mod.host_time_ns()", "__import__('cardsim_torch')._C._set_activity_recording(True)",
                                   "__import__('cardsim_torch')._C._drain_activities()"])
def test_runtime_started_by_another_entry_point_keeps_the_personalitys_preset(py, first):
    # Each of these starts the runtime when nothing else has; it must start it as the
    # personality would (supa: br100), not with the shim's defaults.
    code = _prog("supa", f"""
        {first}
        res.update(name=mod.get_device_properties(0).name, sum=torch.ones(3, device="supa").sum().item())
        """)
    assert _ok(py(code)) == {"name": "BR100", "sum": 3.0}


def test_init_process_group_before_any_device_use(py):
    # The common order in user scripts: the process group first, the device after.
    import subprocess
    port = free_port()
    code = _prog("supa", """
        import torch.distributed as dist
        dist.init_process_group("bccl")
        t = torch.ones(4, device="supa") * (dist.get_rank() + 1)
        dist.all_reduce(t)
        res.update(name=mod.get_device_properties(0).name, sum=t.sum().item())
        dist.destroy_process_group()
        """)
    import os
    from conftest import PYTHON, ROOT
    procs = []
    for r in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k != "DS_ACCELERATOR"}
        env.update(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK="0")
        procs.append(subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=str(ROOT)))
    for p in procs:
        out, err = p.communicate(timeout=300)
        p.stdout, p.stderr = out, err
        assert _ok(p) == {"name": "BR100", "sum": 12.0}
