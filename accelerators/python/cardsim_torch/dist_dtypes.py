"""Dtypes Gloo does not take, for the process group (distributed.py).

Gloo moves and reduces float32/64, float16, bfloat16, int8, uint8, int32, int64 and bool
(complex arrives as its real view); the vendor libraries move any tensor's bytes and reduce
more types. So that a program runs here as on the card:
- a collective that only moves bytes hands Gloo a view of each tensor as a type of the same
  size Gloo takes (the same bytes, so results land in place, bit for bit);
- a reduction of int16, uint16, uint32 or uint64 runs on a wider integer (or, uint64, on the
  same bits as int64; for MIN and MAX with the sign bit flipped, so that signed order is the
  unsigned one) and is narrowed back as the card's integer arithmetic wraps; the float8 types
  are reduced in float32 and rounded once.
"""
from __future__ import annotations

import torch
from torch.distributed import ReduceOp

GLOO_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
                         torch.int32, torch.int64, torch.bool})

# A type Gloo takes per element size: its copies move the bits untouched.
_SAME_SIZE = {1: torch.uint8, 2: torch.float16, 4: torch.int32, 8: torch.int64}

# Unsigned types reduced zero-extended: (the signed view of their bits, the wider type, mask).
_ZERO_EXTENDED = {torch.uint16: (torch.int16, torch.int32, 0xFFFF),
                  torch.uint32: (torch.int32, torch.int64, 0xFFFFFFFF)}

_SIGN_BIT = torch.iinfo(torch.int64).min


def _gloo_takes(t: torch.Tensor) -> bool:
    return t.dtype in GLOO_DTYPES or t.is_complex()


def movable(t: torch.Tensor) -> torch.Tensor:
    """`t` as a type Gloo moves, the same bytes (a view: what Gloo writes lands in `t`);
    complex as its real view (torch hands most collectives that form, not gather)."""
    if t.is_complex():
        return torch.view_as_real(t)
    if t.dtype in GLOO_DTYPES or t.element_size() not in _SAME_SIZE:
        return t
    return t.view(_SAME_SIZE[t.element_size()])


def movable_numel(t: torch.Tensor) -> int:
    """The elements of movable(t)."""
    return t.numel() * (2 if t.is_complex() else 1)


class Reducible:
    """A reduction's host tensors as Gloo reduces them (`wide`, one per tensor: the tensor
    itself where Gloo takes its type), and their results narrowed back (`back`).

    `timing_gloo` (timing mode's stand-in for Gloo, else None): a reduction it carries
    (within its carried bytes, counted on the tensors as the card holds them) is widened and
    carried whatever its widened size; a larger one is left as it is, moving nothing."""

    def __init__(self, host, op, timing_gloo=None):
        self.host = list(host)
        self.op = op
        self._note = None
        nbytes = sum(t.numel() * t.element_size() for t in self.host)
        # whether the reduction moves its values (always, but in timing mode)
        self.carried = timing_gloo is None or nbytes <= timing_gloo.CARRIED_BYTES
        if not self.carried:
            self.wide = list(self.host)
            return
        self.wide = [self._widen(t) for t in self.host]
        if timing_gloo is not None:
            self._note = timing_gloo._noter()
            if any(w is not t for w, t in zip(self.wide, self.host)):
                timing_gloo.carry_next = True

    @property
    def widened(self) -> bool:
        """Whether Gloo moves other bytes than the card's tensors hold (a member whose type
        Gloo takes, disagreeing with this one, would then meet transfers of another size, and
        Gloo aborts a process on that): such a reduction is reported before Gloo starts."""
        return any(w is not t for w, t in zip(self.wide, self.host))

    def _flips_sign(self) -> bool:
        return self.op == ReduceOp.MIN or self.op == ReduceOp.MAX

    def _widen(self, t: torch.Tensor) -> torch.Tensor:
        if _gloo_takes(t):
            return t
        if t.dtype == torch.int16:
            return t.to(torch.int32)
        if t.dtype in _ZERO_EXTENDED:
            bits, wider, mask = _ZERO_EXTENDED[t.dtype]
            return t.view(bits).to(wider) & mask
        if t.dtype == torch.uint64:
            w = t.view(torch.int64)
            return (w ^ _SIGN_BIT) if self._flips_sign() else w.clone()
        if t.is_floating_point():   # the float8 types
            return t.to(torch.float32)
        return t   # no wider form: Gloo names the type it refuses

    def average(self, n: int) -> None:
        """AVG: the sums divided by `n` in place, integers as the vendor libraries' AVG does
        them: the sum as the card's type holds it (wrapped), divided, truncated."""
        for t, w in zip(self.host, self.wide):
            if w.is_floating_point() or w.is_complex():
                w.div_(n)
            elif t.dtype == torch.uint64:   # on int64's bits: an unsigned division, in two halves
                hi, lo = (w >> 32) & 0xFFFFFFFF, w & 0xFFFFFFFF
                w.copy_(((hi // n) << 32) + (((hi % n) << 32) + lo) // n)
            else:
                if t.dtype == torch.int16:
                    w.copy_(((w + (1 << 15)) & 0xFFFF) - (1 << 15))
                elif t.dtype in _ZERO_EXTENDED:
                    w.bitwise_and_(_ZERO_EXTENDED[t.dtype][2])
                w.div_(n, rounding_mode="trunc")

    def narrow_into(self, dst: torch.Tensor, wide: torch.Tensor) -> None:
        """Writes a widened result into `dst` (of the host tensors' type)."""
        if wide.dtype == dst.dtype:
            dst.copy_(wide)
        elif dst.dtype == torch.uint64:
            dst.view(torch.int64).copy_((wide ^ _SIGN_BIT) if self._flips_sign() else wide)
        elif dst.dtype in _ZERO_EXTENDED:
            bits = _ZERO_EXTENDED[dst.dtype][0]
            dst.view(bits).copy_(wide.to(bits))   # wraps, as the card's integers do
        else:
            dst.copy_(wide)
        if self._note is not None and dst.numel():   # carried: the card holds these values
            self._note(dst.data_ptr(), dst.numel() * dst.element_size())

    def back(self) -> None:
        for t, w in zip(self.host, self.wide):
            if w is not t:
                self.narrow_into(t, w)
