"""Cambricon MLU, emulated by cardsim: ``import torch_mlu`` gives PyTorch the ``mlu``
device and the ``torch.mlu`` module."""
from cardsim_torch import Personality, activate

PERSONALITY = Personality(
    device="mlu",
    package="torch_mlu",
    graph_class="MLUGraph",
    comm_backend="cncl",
    visible_env="MLU_VISIBLE_DEVICES",
    default_preset="mlu370-x8",
    profiler_module="cnpx",
    fused_adam_namespace="torch_mlu",
)

mlu = activate(PERSONALITY)
__version__ = "0.1.0+cardsim"
