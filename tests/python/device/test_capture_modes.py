"""capture_error_mode (global, thread_local, relaxed): which threads' potentially unsafe calls
— here an event query, which the vendor runtimes forbid during a capture — fail and invalidate
the capture, as cudaStreamCaptureMode does; the stream stays usable afterwards."""
import threading

import pytest
import torch


def _capture(dm, card, mode, unsafe_call, on_other_thread):
    """Captures y = x * 2 with `unsafe_call` made in the middle; returns (the call's error,
    whether capture_end succeeded, the graph, x, y)."""
    G = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")
    x = torch.ones(64, device=card)
    s = dm.Stream()
    s.wait_stream(dm.current_stream())
    g = G()
    errors = []

    def call():
        try:
            unsafe_call()
        except RuntimeError as e:
            errors.append(e)

    with dm.stream(s):
        g.capture_begin(capture_error_mode=mode)
        y = x * 2
        if on_other_thread:
            t = threading.Thread(target=call)
            t.start()
            t.join()
        else:
            call()
        try:
            g.capture_end()
            ended = True
        except RuntimeError:
            ended = False
    dm.current_stream().wait_stream(s)
    return (errors[0] if errors else None), ended, g, x, y


@pytest.mark.parametrize("mode,other_thread,prohibited", [
    ("global", True, True), ("global", False, True),
    ("thread_local", True, False), ("thread_local", False, True),
    ("relaxed", True, False), ("relaxed", False, False),
])
def test_capture_mode_decides_which_threads_may_make_unsafe_calls(dm, card, mode, other_thread, prohibited):
    outside = dm.Event()
    outside.record()   # work outside the capture
    err, ended, g, x, y = _capture(dm, card, mode, outside.query, other_thread)
    if prohibited:
        assert err is not None and "eventQuery" in str(err) and f"in {mode} mode" in str(err), err
        assert not ended   # the capture was invalidated
    else:
        assert err is None and ended
        x.fill_(3)
        g.replay()
        dm.synchronize()
        assert torch.equal(y.cpu(), torch.full((64,), 6.0))
    # either way the stream is usable afterwards
    s = dm.Stream()
    s.wait_stream(dm.current_stream())
    with dm.stream(s):
        z = x + 1
    s.synchronize()
    assert torch.equal(z.cpu(), x.cpu() + 1)


def test_synchronizing_the_capturing_device_is_never_allowed(dm, card):
    err, ended, *_ = _capture(dm, card, "relaxed", dm.synchronize, False)
    assert err is not None and "deviceSynchronize" in str(err)
    assert not ended


def test_unknown_capture_mode_is_refused(dm, card):
    g = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")()
    with pytest.raises(ValueError, match="capture_error_mode must be"):
        g.capture_begin(capture_error_mode="strict")
