"""cardsim_torch.gloo_hold: tensors handed to Gloo stay held in Python until Gloo's own
references are gone, so that Gloo's worker thread never drops the last one (which needs the
GIL, fatal during interpreter finalization). Gloo is stood in for by an object keeping C++
references to its arguments (a TorchScript list holding them), dropped when the test says."""
import threading
import time

import torch

from cardsim_torch import gloo_hold


class FakeGloo:
    """Keeps each call's tensors referenced from C++ (as Gloo's work does) until finish()."""

    def __init__(self):
        self.works = []

    def allreduce(self, tensors, opts=None):
        work = torch._C.ScriptList(list(tensors))   # C++ references, as Gloo's work takes
        self.works.append(work)
        return work

    def finish(self):
        self.works.clear()


def _drain_now():
    assert gloo_hold.drain(5.0)


def test_a_temporary_stays_held_until_gloo_lets_go_then_is_released():
    _drain_now()
    g = FakeGloo()
    held = gloo_hold.HeldGloo(g)
    t = torch.ones(8)
    before = t._use_count()
    held.allreduce([t])
    assert t._use_count() > before          # the fake work references it from C++
    del t                                    # the caller lets go first (the race)
    assert gloo_hold.held() == 1             # ...but Python still holds it
    g.finish()
    assert gloo_hold.held() == 0             # Gloo let go: released here, on this thread


def test_a_tensor_referenced_elsewhere_is_released_when_back_to_its_count_before_the_call():
    _drain_now()
    g = FakeGloo()
    t = torch.ones(8)
    keep = torch._C.ScriptList([t])          # another C++ reference, kept for the whole test
    base = t._use_count()
    gloo_hold.HeldGloo(g).allreduce([t])
    assert gloo_hold.held() == 1
    g.finish()
    assert t._use_count() == base
    assert gloo_hold.held() == 0             # not waiting for a count of 1 it never reaches
    del keep


def test_nested_arguments_and_keywords_are_all_held():
    _drain_now()
    calls = []

    class Nested:
        def allgather(self, outs, ins, opts=None):
            work = torch._C.ScriptList([x for lst in outs for x in lst] + list(ins))
            calls.append(work)
            return work

    outs = [[torch.zeros(2), torch.zeros(2)]]
    ins = [torch.ones(2)]
    gloo_hold.HeldGloo(Nested()).allgather(outs, ins=ins)
    del outs, ins
    assert gloo_hold.held() == 3
    calls.clear()
    assert gloo_hold.held() == 0


def test_drain_waits_for_a_worker_that_lets_go_late_and_gives_up_at_its_bound():
    _drain_now()
    g = FakeGloo()
    gloo_hold.HeldGloo(g).allreduce([torch.ones(4)])
    assert not gloo_hold.drain(0.05)        # still referenced: gives up at the bound
    threading.Timer(0.1, g.finish).start()   # "the worker" lets go later, on its own thread
    start = time.monotonic()
    assert gloo_hold.drain(5.0)
    assert time.monotonic() - start < 4.0
    assert gloo_hold.held() == 0


def test_non_tensor_attributes_and_results_pass_through():
    g = FakeGloo()
    h = gloo_hold.HeldGloo(g)
    assert h.works is g.works
    t = torch.ones(3)
    _drain_now()
    work = h.allreduce([t])
    assert work is g.works[-1]
    del work
    g.finish()
    _drain_now()
