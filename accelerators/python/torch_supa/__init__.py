"""Biren SUPA, emulated by cardsim: ``import torch_supa`` gives PyTorch the ``supa``
device and the ``torch.supa`` module."""
from cardsim_torch import Personality, activate

PERSONALITY = Personality(
    device="supa",
    package="torch_supa",
    graph_class="SUPAGraph",
    comm_backend="bccl",
    visible_env="SUPA_VISIBLE_DEVICES",
    default_preset="br100",
    runtime_api=("supart", "supaHostRegister", "supaHostUnregister"),
)

supa = activate(PERSONALITY)
__version__ = "0.1.0+cardsim"
