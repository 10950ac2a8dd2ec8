"""Registers ``torch.ops.deepspeed.multi_tensor_adam``, ``multi_tensor_lion`` and ``lamb``
for the SUPA device, synchronously on import (DeepSpeed checks for them once, when it is
imported). In a process that uses another device this import fails with ImportError,
which DeepSpeed's SUPA op builders expect."""
import torch_supa  # noqa: F401  (ImportError when the process uses another device)
from cardsim_torch import _C

_C._register_deepspeed_ops()
