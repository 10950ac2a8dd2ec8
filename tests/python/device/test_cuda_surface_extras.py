"""The parts of torch.cuda's surface a porting user reaches past the basics: importable
submodules (amp, graphs, streams), the host (pinned) allocator behind torch.accelerator,
operators whose result size depends on values (the host waits for the card, as on CUDA),
indexing across devices, the per-process memory fraction, raw allocations, the sync debug
mode, peer access and device properties."""
import warnings

import pytest
import torch


def _host_wait_ms(dm, card, op):
    """Runs `op(b, index)` right after eight 768^3 matmuls were queued on an idle card (b the
    last one's result). Returns the simulated host milliseconds from just before the first
    matmul's issue to the end of `op`, those of `op` alone, and the matmuls' device time."""
    a = torch.randn(768, 768, device=card)
    index = torch.tensor([1, 2], device=card)          # made before: its copy would wait too
    dm.synchronize()
    s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    t_start = dm.host_time_ns()
    s.record()
    for _ in range(8):
        b = a @ a
    e.record()
    t_op = dm.host_time_ns()
    op(b, index)
    t_end = dm.host_time_ns()
    e.synchronize()
    return (t_end - t_start) / 1e6, (t_end - t_op) / 1e6, s.elapsed_time(e)


@pytest.mark.parametrize("what, op", [
    ("nonzero", lambda b, i: torch.nonzero(b[0] > 0)),
    ("boolean mask", lambda b, i: b[b > 0]),
    ("masked_select", lambda b, i: torch.masked_select(b, b > 0)),
    ("where(cond)", lambda b, i: torch.where(b[0] > 0)),
    ("unique", lambda b, i: torch.unique((b[0] > 0).long())),
    ("repeat_interleave", lambda b, i: torch.repeat_interleave(i)),
    ("bincount", lambda b, i: torch.bincount(i)),
    ("masked assignment", lambda b, i: b.__setitem__(b < 0, 0.0)),
    ("equal", lambda b, i: torch.equal(b, b)),
])
def test_value_sized_operators_wait_for_the_card(dm, card, what, op):
    """As on CUDA, the host reads a count back before it can size the result: it waits for
    the work queued before (here matmuls of known device time)."""
    since_start, _, matmul_ms = _host_wait_ms(dm, card, op)
    assert matmul_ms > 0.05
    # The card started the matmuls no earlier than the host issued them: a host that waited
    # for them ends at least their device time after it began issuing them.
    assert since_start >= matmul_ms, f"{what}: the host went on {since_start} ms after it began, the card needed {matmul_ms} ms"


@pytest.mark.parametrize("what, op", [
    ("integer index", lambda b, i: b[i]),
    ("repeat_interleave with output_size", lambda b, i: torch.repeat_interleave(i, i, output_size=3)),
    ("sum", lambda b, i: b.sum()),
])
def test_fixed_size_operators_do_not_wait(dm, card, what, op):
    _, op_ms, matmul_ms = _host_wait_ms(dm, card, op)
    assert op_ms < matmul_ms / 2, f"{what} took {op_ms} ms of host time, as if it waited for the card"


def test_value_sized_results_are_exact(card):
    x = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, 0.0]])
    d = x.to(card)
    assert torch.equal(torch.nonzero(d).cpu(), torch.nonzero(x))
    assert torch.equal(d[d > 0].cpu(), x[x > 0])
    assert torch.equal(torch.unique(d).cpu(), torch.unique(x))


def test_cpu_tensor_indexed_by_device_indices_is_refused(card):
    c = torch.arange(5.0)
    idx = torch.tensor([4, 1], device=card)
    with pytest.raises(IndexError, match=r"indices should be either on cpu or on the same device as the indexed tensor \(cpu\)"):
        c[idx]
    with pytest.raises(IndexError, match="indices should be either on cpu"):
        c[idx] = 1.0
    assert torch.equal(c, torch.arange(5.0))               # nothing written
    d = torch.arange(5.0, device=card)
    assert torch.equal(d[torch.tensor([4, 1])].cpu(), torch.tensor([4.0, 1.0]))   # CPU indices on the card: fine


def test_submodules_import_as_on_cuda(dm, card):
    amp = __import__(f"torch.{card}.amp", fromlist=["GradScaler"])
    graphs = __import__(f"torch.{card}.graphs", fromlist=["graph"])
    streams = __import__(f"torch.{card}.streams", fromlist=["Stream"])
    random = __import__(f"torch.{card}.random", fromlist=["manual_seed"])
    assert amp is dm.amp and graphs.graph is dm.graph and streams.Event is dm.Event
    assert random.get_rng_state is dm.get_rng_state
    assert graphs.make_graphed_callables is dm.make_graphed_callables
    scaler = amp.GradScaler(init_scale=8.0)
    assert isinstance(scaler, amp.GradScaler) and isinstance(scaler, torch.amp.GradScaler)
    assert scaler.get_scale() == 8.0 and scaler._device == card
    with amp.autocast():
        y = torch.randn(4, 4, device=card) @ torch.randn(4, 4, device=card)
    assert y.dtype == torch.float16
    with amp.autocast(dtype=torch.bfloat16):
        y = torch.randn(4, 4, device=card) @ torch.randn(4, 4, device=card)
    assert y.dtype == torch.bfloat16
    assert isinstance(amp.autocast(), torch.amp.autocast)

    @amp.custom_fwd(cast_inputs=torch.float32)
    def f(x):
        return x.dtype

    with amp.autocast():
        assert f(torch.ones(2, device=card, dtype=torch.float16)) == torch.float32
    assert dm.OutOfMemoryError is torch.OutOfMemoryError


def test_accelerator_graph_as_context_manager(dm, card):
    """torch.accelerator.Graph's `with` empties the host cache first (it segfaulted without
    a host allocator registered for the device)."""
    x = torch.zeros(4, device=card)
    dm.synchronize()
    torch.accelerator.empty_host_cache()
    s = torch.Stream(card)
    g = torch.accelerator.Graph()
    s.wait_stream(torch.accelerator.current_stream())
    with s, g:
        x.add_(1)
    g.replay()
    g.replay()
    dm.synchronize()
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


def test_host_memory_stats_count_pinned_blocks(dm, card):
    dm.reset_peak_host_memory_stats()
    before = dm.host_memory_stats()
    p = torch.empty(1000, dtype=torch.uint8, pin_memory=True)
    during = dm.host_memory_stats()
    assert during["active_requests.current"] == before["active_requests.current"] + 1
    assert during["allocated_bytes.current"] == before["allocated_bytes.current"] + 1000
    assert during["num_host_alloc"] == before["num_host_alloc"] + 1
    del p
    after = dm.host_memory_stats()
    assert after["allocated_bytes.current"] == before["allocated_bytes.current"]
    assert after["allocated_bytes.peak"] >= before["allocated_bytes.current"] + 1000
    assert after["num_host_free"] == before["num_host_free"] + 1
    assert dm.host_memory_stats_as_nested_dict()["allocated_bytes"]["current"] == after["allocated_bytes.current"]
    dm.reset_accumulated_host_memory_stats()
    assert dm.host_memory_stats()["num_host_alloc"] == 0
    assert dm.memory.host_memory_stats is dm.host_memory_stats


def test_device_capability_lists_dense_dtypes(card):
    dtypes = torch.accelerator.get_device_capability(card)["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= dtypes
    assert torch.qint8 not in dtypes


def test_memory_fraction_caps_the_allocator(dm, card):
    total = dm.get_device_properties().total_memory
    dm.empty_cache()
    try:
        dm.set_per_process_memory_fraction(0.01)
        assert dm.get_per_process_memory_fraction() == 0.01
        ok = torch.empty(int(total * 0.004), dtype=torch.uint8, device=card)
        with pytest.raises(torch.OutOfMemoryError, match=r"set_per_process_memory_fraction\(0\.01"):
            torch.empty(int(total * 0.008), dtype=torch.uint8, device=card)
        del ok
        assert dm.memory_reserved() <= total * 0.01
    finally:
        dm.set_per_process_memory_fraction(1.0)
    big = torch.empty(int(total * 0.02), dtype=torch.uint8, device=card)   # no limit any more
    del big
    with pytest.raises(ValueError, match="allowed range is 0 to 1"):
        dm.set_per_process_memory_fraction(1.5)


def test_caching_allocator_alloc_and_delete(dm, card):
    base = dm.memory_allocated()
    ptr = dm.caching_allocator_alloc(1 << 20)
    assert ptr != 0 and dm.memory_allocated() == base + (1 << 20)
    dm.caching_allocator_delete(ptr)
    assert dm.memory_allocated() == base
    with pytest.raises(ValueError, match="was not allocated"):
        dm.caching_allocator_delete(ptr)
    nested = dm.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == dm.memory_stats()["allocated_bytes.all.current"]


def test_sync_debug_mode(dm, card):
    x = torch.ones(3, device=card)
    assert dm.get_sync_debug_mode() == 0
    try:
        dm.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            x.sum().item()
            y = x + 1                                   # no host wait: no warning
        assert sum("synchronizing" in str(w.message) for w in seen) == 1
        dm.set_sync_debug_mode(2)
        with pytest.raises(RuntimeError, match=f"called a synchronizing {card} operation"):
            torch.nonzero(y)
    finally:
        dm.set_sync_debug_mode("default")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        dm.set_sync_debug_mode("loud")


def test_peer_access_and_properties(dm, card):
    assert dm.can_device_access_peer(0, 1) and not dm.can_device_access_peer(1, 1)
    with pytest.raises(AssertionError):
        dm.can_device_access_peer(0, dm.device_count())
    with pytest.raises(AssertionError, match="Invalid"):
        dm.get_device_properties(-1)
    p0, p1 = dm.get_device_properties(0), dm.get_device_properties(1)
    assert p0.uuid != p1.uuid and len(p0.uuid) == 36
    assert p1.pci_bus_id == p0.pci_bus_id + 1
    assert dm.clock_rate() == int(p0.clock_hz // 1_000_000)


def test_utilization_and_memory_usage_tell_compute_from_traffic(dm, card):
    # As NVML's: the share of the last sampling period (about a second of wall time) some
    # kernel ran, and the share some traffic moved through the device memory. On-card
    # copies (DMA) keep the memory busy and leave the clusters idle; large matmuls the other
    # way round.
    import time
    x = torch.randn(1 << 22, device=card)
    y = torch.empty_like(x)
    a = torch.randn(2048, 2048, device=card)

    def busy(work, shown):
        # Sustained work until the board shows it: 2.5 s at least (a window of only this
        # work), longer while a loaded machine keeps the board's writer from its period.
        start = time.monotonic()
        while True:
            work()
            dm.synchronize()
            elapsed = time.monotonic() - start
            if elapsed >= 2.5:
                util, mem = dm.utilization(), dm.memory_usage()
                if shown(util, mem) or elapsed > 20:
                    return util, mem

    util, mem = busy(lambda: [y.copy_(x) for _ in range(20)], lambda u, m: u == 0 and m >= 90)
    assert util == 0 and mem >= 90, (util, mem)
    util, mem = busy(lambda: [a @ a for _ in range(5)], lambda u, m: u >= 90 and m < 50)
    assert util >= 90 and mem < 50, (util, mem)
