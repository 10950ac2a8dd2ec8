"""The async-correctness checker through torch.<dev>.async_check(): each planted ordering bug
is reported once, naming both sides with this file's lines, and the same code with the
missing wait, synchronize or record_stream reports nothing."""
import copy
import inspect
import os
import re

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

N = 1 << 14
HERE = os.path.abspath(__file__)


def line() -> int:
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


def names_line(block: str, label: str, lineno: int) -> bool:
    """Whether the report block's `label` side (producer/offender) has this file's line in its stack."""
    m = re.search(rf"\n  {label}:.*?(?=\n  \S|\Z)", block, re.S)
    return bool(m) and f'File "{HERE}", line {lineno},' in m.group(0)


@pytest.fixture
def side(dm):
    return dm.Stream()


def test_tensor_used_on_another_stream_without_a_wait(dm, card, side, capsys):
    x = torch.ones(N, device=card)
    with dm.async_check() as c:
        y = x * 2; produced = line()  # noqa: E702
        with dm.stream(side):
            z = y + 1; offended = line()  # noqa: E702,F841
    assert len(c.reports) == 1, c.reports
    r = c.reports[0]
    assert r.startswith("cardsim check: stream race:")
    assert f"stream {side.stream_id} ({card}:0) reads" in r
    assert names_line(r, "producer", produced) and names_line(r, "offender", offended), r
    assert "wrote it in aten::mul" in r and "reads it in aten::add" in r
    assert r in capsys.readouterr().err


@pytest.mark.parametrize("order", ["wait_stream", "event", "synchronize", "same_stream"])
def test_ordered_uses_report_nothing(dm, card, side, order):
    x = torch.ones(N, device=card)
    with dm.async_check() as c:
        y = x * 2
        if order == "wait_stream":
            side.wait_stream(dm.current_stream())
        elif order == "event":
            e = dm.Event()
            e.record()
            side.wait_event(e)
        elif order == "synchronize":
            dm.synchronize()
        s = dm.current_stream() if order == "same_stream" else side
        with dm.stream(s):
            z = y + 1
        dm.current_stream().wait_stream(s)
        w = z * y   # back on the default stream, after the wait
    assert c.reports == []
    assert torch.equal(w.cpu(), (torch.ones(N) * 2 + 1) * 2)   # numerics unchanged under the checker


def test_write_after_read_on_another_stream_is_a_race(dm, card, side):
    x = torch.ones(N, device=card)
    dm.synchronize()
    with dm.async_check() as c:
        side.wait_stream(dm.current_stream())
        with dm.stream(side):
            s = x.sum(); produced = line()  # noqa: E702,F841
        x.mul_(3); offended = line()  # noqa: E702
    assert len(c.reports) == 1
    assert "stream 0 ({}:0) writes".format(card) in c.reports[0]
    assert names_line(c.reports[0], "producer", produced) and names_line(c.reports[0], "offender", offended)


def test_freed_block_reused_without_record_stream(dm, card, side):
    dm.synchronize()
    dm.empty_cache()   # so that the next block of this size is x's
    with dm.async_check() as c:
        x = torch.ones(N, device=card)
        x_block = x.data_ptr()
        side.wait_stream(dm.current_stream())
        with dm.stream(side):
            y = x * 2; produced = line()  # noqa: E702,F841
        del x
        z = torch.empty(N, device=card)
        assert z.data_ptr() == x_block
        z.fill_(3); offended = line()  # noqa: E702
    assert len(c.reports) == 1, c.reports
    r = c.reports[0]
    assert r.startswith("cardsim check: freed block reused:")
    assert names_line(r, "producer", produced) and names_line(r, "offender", offended)
    assert "record_stream" in r


def test_record_stream_keeps_the_block_until_the_other_stream_is_done(dm, card, side):
    dm.synchronize()
    dm.empty_cache()
    with dm.async_check() as c:
        x = torch.ones(N, device=card)
        side.wait_stream(dm.current_stream())
        with dm.stream(side):
            y = x * 2
        x.record_stream(side)
        del x
        z = torch.empty(N, device=card)
        z.fill_(3)
        dm.synchronize()
        assert torch.equal(y.cpu(), torch.full((N,), 2.0))
    assert c.reports == []


def test_non_blocking_copy_read_before_synchronizing(dm, card, capsys):
    x = torch.arange(N, dtype=torch.float32, device=card)
    with dm.async_check() as c:
        h = (x * 2).to("cpu", non_blocking=True); produced = line()  # noqa: E702
        total = h.sum(); offended = line()  # noqa: E702,F841
    assert len(c.reports) == 1, c.reports
    r = c.reports[0]
    assert r.startswith("cardsim check: host read before copy completed: the host reads host memory")
    assert names_line(r, "producer", produced) and names_line(r, "offender", offended)


@pytest.mark.parametrize("wait", ["stream", "event", "device"])
def test_non_blocking_copy_read_after_synchronizing(dm, card, wait):
    x = torch.arange(N, dtype=torch.float32, device=card)
    with dm.async_check() as c:
        h = (x * 2).to("cpu", non_blocking=True)
        if wait == "stream":
            dm.current_stream().synchronize()
        elif wait == "event":
            e = dm.Event()
            e.record()
            e.synchronize()
        else:
            dm.synchronize()
        assert torch.equal(h, torch.arange(N, dtype=torch.float32) * 2)
    assert c.reports == []


def test_overwriting_the_source_of_a_queued_host_to_device_copy(dm, card):
    src = torch.ones(N).pin_memory()
    dst = torch.empty(N, device=card)
    with dm.async_check() as c:
        dst.copy_(src, non_blocking=True)
        src.fill_(2); offended = line()  # noqa: E702
        dm.synchronize()
        src.fill_(3)   # after the copy: fine
    assert len(c.reports) == 1, c.reports
    assert c.reports[0].startswith("cardsim check: host write before copy completed")
    assert names_line(c.reports[0], "offender", offended)


def test_writing_a_captured_buffer_while_a_replay_may_run(dm, card, side):
    static_in = torch.ones(N, device=card)
    g = getattr(dm, {"mlu": "MLUGraph", "supa": "SUPAGraph"}[card])()
    cap = dm.Stream()
    dm.synchronize()
    with dm.async_check() as c:
        with dm.graph(g, stream=cap):   # captured while checking: the graph's uses are known
            static_out = static_in * 2
        g.replay(); produced = line()  # noqa: E702
        with dm.stream(side):
            static_in.fill_(5); offended = line()  # noqa: E702
        dm.synchronize()
        g.replay()
        static_in.fill_(6)   # on the replay's own stream: ordered
        dm.synchronize()
    assert len(c.reports) == 1, c.reports
    r = c.reports[0]
    assert r.startswith("cardsim check: graph replay race:")
    assert f"graph 1 replayed on stream 0 ({card}:0)" in r or "replayed on stream 0" in r
    assert names_line(r, "producer", produced) and names_line(r, "offender", offended)
    assert torch.equal(static_out.cpu(), torch.full((N,), 10.0))   # the second replay read the 5s


def test_each_site_reports_once(dm, card, side):
    x = torch.ones(N, device=card)
    with dm.async_check() as c:
        for _ in range(3):
            y = x * 2
            with dm.stream(side):
                z = y + 1  # noqa: F841
            dm.synchronize()
    assert len(c.reports) == 1


def test_raise_mode_raises_before_the_offending_operator_and_the_device_stays_usable(dm, card, side):
    x = torch.ones(N, device=card)
    with dm.async_check(raise_errors=True):
        y = x * 2
        out = torch.zeros(N, device=card)
        with dm.stream(side):
            with pytest.raises(dm.AsyncCheckError, match="cardsim check: stream race") as ei:
                out.copy_(y)
        assert "producer:" in str(ei.value) and "offender:" in str(ei.value)
        assert isinstance(ei.value, RuntimeError)
    dm.synchronize()
    assert torch.equal(out.cpu(), torch.zeros(N))   # the operator did not run
    assert torch.equal((y + 1).cpu(), torch.full((N,), 3.0))


def test_correct_training_step_with_a_side_stream_reports_nothing(dm, card):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    model = copy.deepcopy(ref).to(card)
    opt, ref_opt = torch.optim.Adam(model.parameters(), lr=1e-3), torch.optim.Adam(ref.parameters(), lr=1e-3)
    data = torch.randn(16, 32)
    copy_stream = dm.Stream()
    with dm.async_check() as c:
        for _ in range(3):
            with dm.stream(copy_stream):   # prefetch on a side stream, as data loaders do
                batch = data.pin_memory().to(card, non_blocking=True)
            dm.current_stream().wait_stream(copy_stream)
            batch.record_stream(dm.current_stream())
            loss = model(batch).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_host = loss.item()
            ref_loss = ref(data).square().mean()   # the same step on the CPU
            ref_opt.zero_grad()
            ref_loss.backward()
            ref_opt.step()
    assert c.reports == []
    assert loss_host == pytest.approx(ref_loss.item(), rel=1e-5)   # the checker changes no result


@pytest.mark.skipif(bool(os.environ.get("CARDSIM_CHECK")), reason="CARDSIM_CHECK checks the whole process")
def test_off_outside_the_context(dm, card, side, capsys):
    assert _get_current_dispatch_mode() is None
    x = torch.ones(N, device=card)
    y = x * 2
    with dm.stream(side):
        z = y + 1  # noqa: F841
    dm.synchronize()
    assert "cardsim check" not in capsys.readouterr().err
