"""cardsim's PyTorch device: one implementation behind torch_mlu and torch_supa.

A personality names the device (``mlu``/``supa``), its ``torch.<name>`` module, graph
class, collective backend, visible-devices variable and default preset. ``activate``
claims PyTorch's PrivateUse1 slot for it; the slot can be renamed once per process, so a
second personality in the same process is refused with an ImportError.
"""
from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass

import torch

__all__ = ["Personality", "activate", "active_personality", "execution_mode", "set_execution_mode"]

_MODES = ("full", "timing")


def set_execution_mode(mode: str) -> None:
    """Chooses the execution mode before the first device use (as CARDSIM_EXECUTION does):
    "full" runs every kernel's arithmetic, "timing" times the same commands without doing
    any work or touching device memory (reads of device data give zeros)."""
    if mode not in _MODES:
        raise ValueError(f"unknown execution mode {mode!r} (valid: {', '.join(_MODES)})")
    from . import _C
    if _C._is_initialized():
        current = _C._execution_mode()
        if current != mode:
            raise RuntimeError(f"the emulated cards already run in {current!r} mode; the execution mode "
                               f"must be chosen before the first device use")
        return
    os.environ["CARDSIM_EXECUTION"] = mode


def execution_mode() -> str:
    """The execution mode: "full" or "timing" (without starting the runtime)."""
    from . import _C
    if _C._is_initialized():
        return _C._execution_mode()
    return os.environ.get("CARDSIM_EXECUTION") or "full"


@dataclass(frozen=True)
class Personality:
    device: str               # "mlu": the torch device type and the module torch.<device>
    package: str              # "torch_mlu": the package users import
    graph_class: str          # "MLUGraph"
    comm_backend: str         # "cncl": the torch.distributed backend
    visible_env: str          # "MLU_VISIBLE_DEVICES"
    default_preset: str       # "mlu370-x8"
    profiler_module: str | None = None   # "cnpx" (MLU's NVTX-like ranges)
    fused_adam_namespace: str | None = None  # "torch_mlu": torch.ops.<ns>.fused_adam
    # The vendor runtime's Python handle: (accessor, register call, unregister call), e.g.
    # torch.supa.supart().supaHostRegister(addr, nbytes, flags) -> status (0 = success).
    runtime_api: tuple[str, str, str] | None = None


_active: Personality | None = None


def active_personality() -> Personality | None:
    return _active


def activate(p: Personality):
    """Registers the device for personality ``p`` and returns its torch.<device> module."""
    global _active
    if _active is not None:
        if _active == p:
            return getattr(torch, p.device)
        raise ImportError(
            f"{p.package} cannot be imported: this process already uses {_active.package} "
            f"(device '{_active.device}'). PyTorch's PrivateUse1 device can be renamed once per "
            f"process, so {_active.package} and {p.package} cannot be used together; "
            f"run them in separate processes")
    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", p.device):
        raise ImportError(
            f"{p.package} cannot be imported: PyTorch's PrivateUse1 device is already named "
            f"'{current}' in this process (it can be renamed once per process)")

    from . import _C  # the extension registers its kernels, allocator and guard on load
    from . import device_module, distributed, host_time

    _C._activate(p.device, p.visible_env, p.default_preset)
    if current == "privateuseone":
        torch.utils.rename_privateuse1_backend(p.device)
    _C._register_graph_impl()
    module = device_module.build(p, _C)
    torch._register_device_module(p.device, module)
    sys.modules[f"torch.{p.device}"] = module
    # Importable submodules, as torch.cuda's are: `from torch.mlu.amp import GradScaler`.
    submodules = dict(module._submodules)
    for sub in (p.profiler_module or "nvtx", "_utils"):
        submodules[f"torch.{p.device}.{sub}"] = getattr(module, sub)
    sys.modules.update(submodules)
    # torch.profiler.ProfilerActivity.MLU (.SUPA): the name the vendor's users write.
    from torch.profiler import ProfilerActivity
    if not hasattr(ProfilerActivity, p.device.upper()):
        setattr(ProfilerActivity, p.device.upper(), ProfilerActivity.PrivateUse1)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True)
    if p.fused_adam_namespace:
        _C._register_fused_adam(p.fused_adam_namespace)
    distributed.register_backend(p)
    host_time.install(_C, p.device)
    from . import checker
    checker.install_from_env(_C, p.device)   # CARDSIM_CHECK
    _active = p
    # Registered first, so it runs after the reports (atexit is last in, first out). Python
    # ends an uncaught KeyboardInterrupt (Ctrl-C) by SIGINT after finalizing, skipping C's
    # atexit: the trace and the status file are completed from here instead.
    atexit.register(_C._run_exit_cleanups, "exit")
    atexit.register(_report_fallbacks)
    return module


def _report_fallbacks() -> None:
    if os.environ.get("CARDSIM_REPORT_HOST_READS", "") not in ("", "0"):
        from . import _C, host_reads
        if _C._is_initialized() and _C._execution_mode() == "timing":
            host_reads.report(_C)
    if os.environ.get("CARDSIM_REPORT_FALLBACKS", "") not in ("", "0"):
        from . import _C
        ops = _C._fallback_operators()
        print(f"cardsim: {len(ops)} operator(s) ran through the CPU fallback"
              + (": " + ", ".join(ops) if ops else ""), file=sys.stderr)
