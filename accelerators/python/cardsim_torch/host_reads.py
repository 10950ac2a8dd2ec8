"""Host reads of device data in timing mode (CARDSIM_EXECUTION=timing).

There, a read of device data on the host (``.item()``, ``.cpu()``, ``.tolist()``, printing)
gives zeros, so a program whose control flow depends on such a value (a loss-scale
overflow check, early stopping) may go another way than a full run would. Each read is
counted at its calling site; ``CARDSIM_REPORT_HOST_READS=1`` prints them at exit.
"""
from __future__ import annotations

import os
import sys

_SKIP = (os.sep + "torch" + os.sep, os.sep + "cardsim_torch" + os.sep, "<frozen ")


def site() -> str:
    """The innermost Python frame outside torch and cardsim_torch: "file:line (function)"."""
    f = sys._getframe(1)
    while f is not None and any(s in f.f_code.co_filename for s in _SKIP):
        f = f.f_back
    if f is None:
        return "(no Python frame)"
    return f"{f.f_code.co_filename}:{f.f_lineno} ({f.f_code.co_name})"


def report(_C, stream=None) -> None:
    reads = _C._host_reads()
    if not reads:
        return
    stream = stream or sys.stderr
    total = sum(n for _, n, _ in reads)
    print(f"cardsim: {total} host read(s) of device data in timing mode gave zeros; where a full run "
          f"reads real values, control flow may differ. By site (count, bytes):", file=stream)
    for where, n, nbytes in reads:
        print(f"  {n:8d} {int(nbytes):12d}  {where}", file=stream)
