"""in_flight.finish_touching: which gathers in flight a new collective finishes first, by the
byte spans they read and write (the bounds check that rules most out must not rule out one
whose spans do meet)."""
from cardsim_torch import in_flight


class FakeWork:
    def __init__(self, reads, writes):
        self._r, self._w = reads, writes
        self.finished = False
        in_flight.add(self)

    def reads(self):
        return self._r

    def writes(self):
        return self._w

    def finish(self):
        self.finished = True
        in_flight.discard(self)


def _clear():
    in_flight.finish_all()


def test_only_the_works_whose_spans_meet_finish():
    _clear()
    # a write in two pieces whose bounds cover the new call's bytes, but neither piece does
    split = FakeWork(reads=[], writes=[(0, 100), (300, 400)])
    meets_write = FakeWork(reads=[], writes=[(150, 160)])       # writes what the call reads
    reads_its_output = FakeWork(reads=[(250, 260)], writes=[])  # reads what the call writes
    elsewhere = FakeWork(reads=[(1000, 1100)], writes=[(2000, 2100)])
    reads_its_input = FakeWork(reads=[(120, 130)], writes=[])   # both only read: no order needed
    in_flight.finish_touching([(100, 200)], [(200, 300)])
    assert [w.finished for w in (split, meets_write, reads_its_output, elsewhere, reads_its_input)] == \
        [False, True, True, False, False]
    assert in_flight.any_in_flight()
    _clear()
    assert not in_flight.any_in_flight() and split.finished and elsewhere.finished


def test_spans_touching_end_to_start_do_not_meet():
    _clear()
    before = FakeWork(reads=[], writes=[(0, 100)])
    after = FakeWork(reads=[(300, 400)], writes=[])
    in_flight.finish_touching([(100, 200)], [(200, 300)])
    assert not before.finished and not after.finished
    in_flight.finish_touching([(99, 100)], [])
    assert before.finished and not after.finished
    _clear()


def test_nothing_touched_finishes_nothing():
    _clear()
    w = FakeWork(reads=[(0, 10)], writes=[(0, 10)])
    in_flight.finish_touching([], [])
    assert not w.finished
    _clear()
