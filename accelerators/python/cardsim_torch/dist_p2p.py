"""The personality's process group's point-to-point calls (distributed.py): sends buffered
on the host, receives posted where their batch began, both joined on the fabric server."""
from __future__ import annotations

import torch

from .dist_work import BufferedSendWork as _BufferedSendWork, PendingWork as _PendingWork
from .dist_work import RuntimeMarker as _RuntimeMarker


class PointToPoint:
    """Mixed into CardsimProcessGroup, whose helpers (_host, _charge, _gloo, _ranks, _sends,
    _p2p_batch, _device_type) these use."""

    def _batch_posted(self, tensors):
        """The event where the current batch of point-to-point calls began on the device's
        current stream (recorded now if this call begins one); None for CPU tensors."""
        dev = [t for t in tensors if t.device.type == self._device_type]
        if not dev:
            return None
        index = dev[0].device.index
        stream = getattr(torch, self._device_type).current_stream(index)
        key = (index, stream.stream_id)
        if self._p2p_batch is None or self._p2p_batch[0] != key:
            self._p2p_batch = (key, _RuntimeMarker(index))
        return self._p2p_batch[1]

    def _end_p2p_batch(self):
        self._p2p_batch = None

    def send(self, tensors, dst: int, tag: int = 0):
        h = self._host()
        # Buffered: the bytes are copied out now and the call is done for its caller; Gloo
        # hands the copy over once the receiver posts, so sends issued before their receives
        # (every rank sending first, tags received in another order) wait for no one.
        staged = [h(t).clone() for t in tensors]
        h.finish()
        self._batch_posted(tensors)
        self._charge("send", tensors, ranks=[self._ranks[self.rank()], self._ranks[dst]], p2p=1, tag=tag)
        self._sends.add(self._gloo.send(staged, dst, tag), self._p2p_what("send to", dst, tensors, tag),
                        self._ranks[dst])
        return _BufferedSendWork(self._end_p2p_batch, tensors, self._sends)

    def recv(self, tensors, src: int, tag: int = 0):
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        # Posted now, on the stream current now; timed when waited on (when the sender has
        # reported its side: Gloo's bytes have arrived), so that posting a receive before
        # one's own send, as exchanges do, never blocks.
        posted = self._batch_posted(tensors)
        ranks = [self._ranks[src], self._ranks[self.rank()]]

        def finish():
            self._end_p2p_batch()
            self._charge("recv", tensors, ranks=ranks, p2p=2, tag=tag, posted=posted)
            h.finish()

        return _PendingWork(self._gloo.recv(host, src, tag), finish, tensors,
                            self._p2p_what("recv from", src, tensors, tag), self._ranks[src], peer_in_group=src)

    def _p2p_what(self, verb: str, peer: int, tensors, tag: int) -> str:
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        return (f"{verb} rank {self._ranks[peer]} ({nbytes} bytes, tag {tag}) in process group "
                f"[{', '.join(map(str, self._ranks))}]")

    def recv_anysource(self, tensors, tag: int = 0):
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        # the sender is known only on arrival: timed as from the next rank of the group
        src = (self.rank() + 1) % self.size()
        self._charge("recv", tensors, ranks=[self._ranks[src], self._ranks[self.rank()]])
        return _PendingWork(self._gloo.recv_anysource(host, tag), h.finish, tensors)
