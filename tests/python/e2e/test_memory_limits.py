"""Device memory limits, end to end: the simulated capacity of the preset (not the host's)
decides out-of-memory, and simulated allocations may exceed the host's memory."""
import json
import textwrap

import pytest

GiB = 1 << 30


def _run(py, card, body, env=None, timeout=300):
    code = textwrap.dedent(f"""\
        import json, torch
        import torch_{card}
        mod = torch.{card}
        res = {{}}
        """) + textwrap.dedent(body) + '\nprint("RESULT " + json.dumps(res))\n'
    proc = py(code, env=env, timeout=timeout)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


_OOM = """
    cap = mod.get_device_properties(0).total_memory
    res["cap"] = cap
    st0 = mod.memory_stats(0)
    res["ooms0"] = st0["num_ooms"]
    held = torch.empty(cap // 2, dtype=torch.uint8, device="{card}:0")
    res["held"] = mod.memory_allocated(0)
    errs = []
    for nbytes in (cap, cap - cap // 2 + (64 << 20)):   # each exceeds what is left
        try:
            torch.empty(nbytes, dtype=torch.uint8, device="{card}:0")
        except torch.OutOfMemoryError as e:
            errs.append([type(e).__name__, str(e), isinstance(e, RuntimeError)])
        except Exception as e:
            errs.append([type(e).__name__, str(e), False])
        else:
            errs.append(None)
    res["errs"] = errs
    res["ooms1"] = mod.memory_stats(0)["num_ooms"]
    # the device stays usable: allocate small, compute, accounting consistent
    res["after_oom_alloc"] = mod.memory_allocated(0)
    x = torch.arange(1000, dtype=torch.float32, device="{card}:0")
    y = (x * 2 + 1).sum()
    res["sum"] = y.item()
    res["alloc_small"] = mod.memory_allocated(0)
    del x, y
    res["alloc_freed"] = mod.memory_allocated(0)
    del held
    res["alloc_none"] = mod.memory_allocated(0)
    # all of it fits once the half is freed
    whole = torch.empty(cap - (64 << 20), dtype=torch.uint8, device="{card}:0")
    res["alloc_whole"] = mod.memory_allocated(0)
    del whole
    mod.empty_cache()
    res["reserved_end"] = mod.memory_reserved(0)
    res["free_end"] = list(mod.mem_get_info(0))
    # another device was not affected
    res["other"] = mod.memory_stats(1)["num_ooms"]
    """


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_out_of_memory_at_preset_capacity(py, card):
    res = _run(py, card, _OOM.format(card=card))
    cap = res["cap"]
    assert cap == {"mlu": 23374 << 20, "supa": 65536 << 20}[card]
    assert res["ooms0"] == 0
    assert res["held"] >= cap // 2
    for err in res["errs"]:
        assert err is not None, "an allocation beyond the simulated capacity succeeded"
        kind, msg, is_runtime_error = err
        assert kind == "OutOfMemoryError" and is_runtime_error, err
        assert f"{card}:0" in msg, msg                       # the device
        assert "Tried to allocate" in msg and "GiB" in msg, msg  # the requested size
        assert "total capacity" in msg and "free" in msg, msg
    assert f"{cap / GiB:.2f} GiB" in res["errs"][0][1], res["errs"][0][1]
    assert res["ooms1"] == 2
    assert res["after_oom_alloc"] == res["held"]
    assert res["sum"] == pytest.approx(sum(2 * i + 1 for i in range(1000)))
    assert res["held"] + 4000 <= res["alloc_small"] <= res["held"] + 4000 + (1 << 20)
    assert res["alloc_freed"] == res["held"]
    assert res["alloc_none"] == 0
    assert res["alloc_whole"] == cap - (64 << 20)
    assert res["reserved_end"] == 0
    assert res["free_end"] == [cap, cap]
    assert res["other"] == 0


def test_simulated_allocations_larger_than_host_memory(py):
    # 2 x 20 GiB at once on a 24 GiB host: only touched bytes cost host memory.
    res = _run(py, "mlu", """
        import resource
        ts = [torch.empty(20 << 30, dtype=torch.uint8, device=f"mlu:{i}") for i in (0, 1)]
        res["alloc"] = [mod.memory_allocated(i) for i in range(3)]
        res["peak"] = [mod.max_memory_allocated(i) for i in (0, 1)]
        res["free"] = [mod.mem_get_info(i)[0] for i in (0, 1)]
        # the memory works where it is touched
        ts[1][-4096:] = 7
        ts[0][:4096] = 3
        res["tail"] = ts[1][-4096:].sum().item()
        res["head"] = ts[0][:4096].sum().item()
        del ts
        res["after"] = [mod.memory_allocated(i) for i in (0, 1)]
        mod.empty_cache()
        res["reserved"] = [mod.memory_reserved(i) for i in (0, 1)]
        again = torch.empty(20 << 30, dtype=torch.uint8, device="mlu:0")
        res["again"] = mod.memory_allocated(0)
        res["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        """)
    assert res["alloc"][0] == 20 << 30 and res["alloc"][1] == 20 << 30 and res["alloc"][2] == 0
    assert res["peak"] == [20 << 30, 20 << 30]
    assert res["free"] == [(23374 << 20) - (20 << 30)] * 2
    assert res["tail"] == 7 * 4096 and res["head"] == 3 * 4096
    assert res["after"] == [0, 0]
    assert res["reserved"] == [0, 0]
    assert res["again"] == 20 << 30
    assert res["maxrss_mib"] < 4096, "untouched device memory cost host memory"


def test_supa_allocations_beyond_host_memory(py):
    res = _run(py, "supa", """
        ts = [torch.empty(55 << 30, dtype=torch.uint8, device=f"supa:{i}") for i in range(3)]
        res["alloc"] = [mod.memory_allocated(i) for i in range(3)]
        ts[2][-10:] = 1
        res["tail"] = ts[2][-10:].sum().item()
        del ts
        res["after"] = [mod.memory_allocated(i) for i in range(3)]
        """)
    assert res["alloc"] == [55 << 30] * 3
    assert res["tail"] == 10
    assert res["after"] == [0, 0, 0]
