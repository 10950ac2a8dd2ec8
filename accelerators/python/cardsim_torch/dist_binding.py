"""A process group of the personality's backend (distributed.py) bound to its device by
`init_process_group(device_id=...)` / `new_group(device_id=...)`, and kept out of torch's
group splitting, which it cannot do."""
from __future__ import annotations

import torch


def bind_device(pg, caller) -> None:
    """torch binds the device (checked there) to the group it made, which a Python process
    group replaces with itself, so the binding (barrier's device, the groups made after it)
    would be lost. It is read from torch's group-making call, the creator's caller."""
    device = caller.f_locals.get("device_id") if caller is not None else None
    if isinstance(device, torch.device):
        pg.bound_device_id = device


class UnsplittableBackend:
    """The backend torch gets for a device of the group, as it is but for splitting: with a
    bound device, torch splits new groups from the default group's backend (every rank,
    members or not, as ncclCommSplit needs) where it says it supports splitting. The Gloo
    that moves the bytes says so, yet a group of ours cannot be split: each group is made
    whole (new_group), and split_group is refused by torch as for any backend that cannot."""

    supports_splitting = False

    def __init__(self, backend):
        object.__setattr__(self, "_backend", backend)

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def __setattr__(self, name, value):
        setattr(self._backend, name, value)

    def __repr__(self) -> str:
        return f"UnsplittableBackend({self._backend!r})"
