"""Streams and events of torch.<card>, checked against torch.cuda semantics. Times are
simulated (Event.elapsed_time, host_time_ns), never wall clock."""
import os

import pytest
import torch

N = 1024   # a 1024x1024 fp32 matmul: 2.1 GFLOP, well above launch overheads on both cards




@pytest.fixture(scope="module")
def mat(card):
    return torch.randn(N, N, device=card)


def timed_matmuls(dm, x, n):
    """Simulated ms of n matmuls on the current stream."""
    start, end = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        x @ x
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


# ---- streams -------------------------------------------------------------------------

def test_default_and_current_stream(dm, card):
    """The default stream has id 0, is current at start, and lives on its device."""
    ds = dm.default_stream()
    cs = dm.current_stream()
    assert ds.stream_id == 0
    assert cs == ds
    assert ds.device == torch.device(card, 0)
    assert ds.device_index == 0
    assert isinstance(ds, dm.Stream) and isinstance(ds, torch.Stream)
    assert dm.default_stream(3).device == torch.device(card, 3)
    assert dm.default_stream(3).stream_id == 0
    assert dm.current_stream(f"{card}:2") == dm.default_stream(2)


def test_new_stream(dm, card):
    """Stream() is a new non-default stream on the current device, priority 0."""
    s = dm.Stream()
    t = dm.Stream()
    assert s.device == torch.device(card, 0)
    assert s.priority == 0
    assert s.stream_id != 0
    assert s != dm.default_stream() and s != t
    assert s == s and hash(s) == hash(s)
    assert type(s).__module__ == f"torch.{card}"
    with dm.device(2):
        assert dm.Stream().device == torch.device(card, 2)


def test_stream_priority(dm):
    """Priorities: lower is higher; positive values map to the lowest (0)."""
    assert dm.Stream(priority=-1).priority == -1
    assert dm.Stream(priority=0).priority == 0
    assert dm.Stream(priority=5).priority == 0
    p = dm.Stream(priority=-100).priority
    assert -100 < p < 0


def test_stream_priority_range_mlu(dm, card):
    """MLU: the greatest priority torch_mlu exposes is -3."""
    if card != "mlu":
        pytest.skip("MLU only")
    assert dm.Stream(priority=-100).priority == -3


def test_stream_on_other_device(dm, card):
    """Stream(device=1) lives on device 1 without changing the current device."""
    s1 = dm.Stream(device=1)
    assert s1.device == torch.device(card, 1)
    assert s1.device_index == 1
    assert dm.current_device() == 0
    s2 = dm.Stream(device=f"{card}:2")
    assert s2.device_index == 2


def test_set_stream(dm):
    """set_stream makes the stream current; current_stream() equals it."""
    s = dm.Stream()
    dm.set_stream(s)
    assert dm.current_stream() == s
    assert dm.current_stream().stream_id == s.stream_id
    dm.set_stream(None)               # no-op, as in torch.cuda
    assert dm.current_stream() == s
    dm.set_stream(dm.default_stream())
    assert dm.current_stream() == dm.default_stream()


def test_set_stream_other_device_switches_device(dm):
    """As in torch.cuda, setting a stream of another device makes that device current."""
    s1 = dm.Stream(device=1)
    dm.set_stream(s1)
    assert dm.current_stream(1) == s1
    assert dm.current_device() == 1


def test_accelerator_set_stream_switches_device(dm):
    """torch.accelerator.set_stream sets the stream and its device."""
    s1 = dm.Stream(device=1)
    torch.accelerator.set_stream(s1)
    assert dm.current_device() == 1
    assert dm.current_stream() == s1
    assert torch.accelerator.current_stream() == s1


def test_stream_context_nests_and_restores(dm):
    """stream(...) contexts nest and restore the previous stream."""
    ds = dm.default_stream()
    s, t = dm.Stream(), dm.Stream()
    with dm.stream(s):
        assert dm.current_stream() == s
        with dm.stream(t):
            assert dm.current_stream() == t
        assert dm.current_stream() == s
    assert dm.current_stream() == ds
    with dm.stream(None):
        assert dm.current_stream() == ds


def test_stream_context_restores_on_exception(dm):
    """The previous stream comes back when the body raises."""
    s = dm.Stream()
    with pytest.raises(KeyError):
        with dm.stream(s):
            raise KeyError("boom")
    assert dm.current_stream() == dm.default_stream()


def test_stream_context_other_device(dm, card):
    """A stream of device 1 switches device and stream, then restores both."""
    s1 = dm.Stream(device=1)
    with dm.stream(s1):
        assert dm.current_device() == 1
        assert dm.current_stream() == s1
        assert torch.empty(1, device=card).get_device() == 1
    assert dm.current_device() == 0
    assert dm.current_stream() == dm.default_stream(0)
    assert dm.current_stream(1) == dm.default_stream(1)


def test_stream_context_object(dm):
    """StreamContext used by hand sets and restores the current stream."""
    s = dm.Stream()
    ctx = dm.StreamContext(s)
    ctx.__enter__()
    assert dm.current_stream() == s
    ctx.__exit__(None, None, None)
    assert dm.current_stream() == dm.default_stream()


def test_stream_query_and_synchronize(dm, mat):
    """query() is True when idle, False with pending simulated work, True after sync."""
    s = dm.Stream()
    assert s.query() is True
    s.wait_stream(dm.current_stream())   # mat was made on the default stream
    with dm.stream(s):
        for _ in range(4):
            y = mat @ mat
    assert s.query() is False
    assert s.synchronize() is None
    assert s.query() is True
    assert torch.allclose(y.cpu(), mat.cpu() @ mat.cpu(), rtol=1e-4, atol=1e-2)


def test_synchronize_advances_host_clock(dm, mat):
    """synchronize() moves the simulated host clock to the completion of the work."""
    dm.synchronize()
    h0 = dm.host_time_ns()
    start, end = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    start.record()
    for _ in range(4):
        mat @ mat
    end.record()
    h1 = dm.host_time_ns()
    dm.synchronize()
    h2 = dm.host_time_ns()
    device_ns = start.elapsed_time(end) * 1e6
    assert h1 > h0                               # launches cost host time
    assert h2 - h1 > 0
    assert h2 - h0 >= device_ns * 0.99           # the host waited for the device


def test_wait_stream_orders_work(dm, card, mat):
    """After wait_stream, work on the waiting stream starts after the other's work."""
    side = dm.Stream()
    start = dm.Event(enable_timing=True)
    start.record()
    side.wait_stream(dm.current_stream())
    with dm.stream(side):
        for _ in range(4):
            y = mat @ mat
        side_done = dm.Event(enable_timing=True)
        side_done.record()
    dm.current_stream().wait_stream(side)
    after = dm.Event(enable_timing=True)
    after.record()
    z = y + 1
    dm.synchronize()
    assert start.elapsed_time(after) >= start.elapsed_time(side_done) > 0
    assert torch.allclose(z.cpu(), mat.cpu() @ mat.cpu() + 1, rtol=1e-4, atol=1e-2)


def test_streams_run_concurrently_without_wait(dm, mat):
    """Without a wait, the current stream does not wait for a side stream."""
    side = dm.Stream()
    start = dm.Event(enable_timing=True)
    start.record()
    side.wait_event(start)
    with dm.stream(side):
        for _ in range(4):
            mat @ mat
        side_done = dm.Event(enable_timing=True)
        side_done.record()
    mine = dm.Event(enable_timing=True)
    mine.record()
    dm.synchronize()
    assert start.elapsed_time(mine) < start.elapsed_time(side_done)


# ---- events --------------------------------------------------------------------------

def test_event_record_synchronize_query(dm, card, mat):
    """An event completes after the work before it; query() reports that."""
    e = dm.Event()
    assert e.query() is True               # never recorded: nothing to wait for
    for _ in range(4):
        mat @ mat
    e.record()
    assert e.query() is False
    e.synchronize()
    assert e.query() is True
    assert type(e).__module__ == f"torch.{card}"
    assert isinstance(e, torch.Event)


def test_elapsed_time_positive_and_grows(dm, mat, card):
    """elapsed_time > 0 around a matmul, at least its roofline, and 4 take longer than 1."""
    t1 = timed_matmuls(dm, mat, 1)
    t4 = timed_matmuls(dm, mat, 4)
    assert t1 > 0
    peak = dm.get_device_properties().peak_fp32_flops
    assert t1 >= 2 * N ** 3 / peak * 1e3 * 0.99
    assert t4 > 2 * t1
    assert t4 < 8 * t1


def test_elapsed_time_is_deterministic(dm, mat):
    """The same work timed twice in the same state gives the same simulated time."""
    timed_matmuls(dm, mat, 1)
    a = timed_matmuls(dm, mat, 2)
    b = timed_matmuls(dm, mat, 2)
    assert a == pytest.approx(b, rel=1e-6)


def test_elapsed_time_without_timing_raises(dm):
    """An event created without enable_timing cannot be timed."""
    a, b = dm.Event(), dm.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)
    c = dm.Event(enable_timing=True)
    c.record()
    c.synchronize()
    with pytest.raises(RuntimeError):
        c.elapsed_time(b)


def test_elapsed_time_unrecorded_raises(dm):
    """Timing an event that was never recorded raises."""
    a, b = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    a.record()
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)


def test_record_event_and_wait_event(dm, mat):
    """Stream.record_event returns an event; another stream waits on it."""
    side = dm.Stream()
    start = dm.Event(enable_timing=True)
    start.record()
    side.wait_event(start)
    with dm.stream(side):
        for _ in range(4):
            y = mat @ mat
    done = side.record_event(dm.Event(enable_timing=True))
    assert isinstance(done, dm.Event)
    assert done.query() is False
    dm.current_stream().wait_event(done)
    after = dm.Event(enable_timing=True)
    after.record()
    z = y * 2
    after.synchronize()
    assert done.query() is True
    assert start.elapsed_time(after) >= start.elapsed_time(done) > 0
    assert torch.allclose(z.cpu(), 2 * (mat.cpu() @ mat.cpu()), rtol=1e-4, atol=1e-2)
    e = side.record_event()
    assert isinstance(e, dm.Event)


def test_event_wait_default_stream(dm, mat):
    """Event.wait() with no stream makes the current stream wait."""
    side = dm.Stream()
    start = dm.Event(enable_timing=True)
    start.record()
    side.wait_event(start)
    with dm.stream(side):
        for _ in range(2):
            mat @ mat
        e = dm.Event(enable_timing=True)
        e.record()
    e.wait()
    after = dm.Event(enable_timing=True)
    after.record()
    dm.synchronize()
    assert start.elapsed_time(after) >= start.elapsed_time(e)


def test_event_record_on_stream_argument(dm, mat):
    """Event.record(stream) records on that stream, not the current one."""
    side = dm.Stream()
    with dm.stream(side):
        for _ in range(4):
            mat @ mat
    e = dm.Event()
    e.record(side)
    assert e.query() is False
    side.synchronize()
    assert e.query() is True


def test_event_on_other_device_stream(dm, card, mat):
    """An event recorded on a stream of device 1 is waited on by device 0."""
    s1 = dm.Stream(device=1)
    x1 = mat.to(f"{card}:1")
    s1.wait_stream(dm.current_stream(1))   # x1 was copied on device 1's default stream
    with dm.stream(s1):
        y1 = x1 @ x1
        e = dm.Event()
        e.record()
    dm.current_stream().wait_event(e)
    z = y1.to(f"{card}:0") + 0
    dm.synchronize()
    assert e.query() is True
    assert z.device == torch.device(card, 0)
    assert torch.allclose(z.cpu(), mat.cpu() @ mat.cpu(), rtol=1e-4, atol=1e-2)


def test_external_stream_and_generic_types(dm, card):
    """ExternalStream subclasses Stream; torch.Stream/torch.Event work for the card."""
    assert issubclass(dm.ExternalStream, dm.Stream)
    s = torch.Stream(device=card)
    assert s.device.type == card
    e = torch.Event(device=card, enable_timing=True)
    e.record(s)
    e.synchronize()
    assert e.query() is True


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer's quarantine holds freed memory: the resident set says nothing")
def test_a_million_events_keep_memory_flat(dm):
    """Destroyed events are released: creating and destroying a million keeps RSS flat."""
    s = dm.Stream()
    for _ in range(20000):
        dm.Event().record(s)
    dm.synchronize()
    before = _rss_bytes()
    for _ in range(1_000_000):
        dm.Event(enable_timing=True).record(s)
    dm.synchronize()
    # A kept event object costs over 100 bytes: 100 MB for a million.
    assert _rss_bytes() - before < 16 << 20
