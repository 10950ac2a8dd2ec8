"""torch.compile's default backend (Inductor) on the emulated device.

Inductor finds an out-of-tree device's code generators on its device module
(``torch.mlu.Scheduling``, ``.PythonWrapperCodegen``, ``.CppWrapperCodegen``,
``.WrapperFxCodegen``); ``attach`` provides them lazily, so importing ``torch_mlu`` does not
import Inductor. Device memory is host-addressable, so the kernels are Inductor's own C++
kernels for the CPU, run on the device's memory: each call goes through the extension's ``_launch_compiled``,
which runs it at once (or, while a graph is captured, at each replay), skips it in timing mode,
and queues its cost on the current stream as the device's other kernels do: elementwise
work over the bytes of its operands (Inductor's fused kernels are memory-bound). Matrix
products and other library calls Inductor leaves to ATen run as the device's operators.
"""
from __future__ import annotations

import types

_CODEGEN_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def _codegen_classes(device: str) -> dict:
    from torch._dynamo.device_interface import register_interface_for_device
    from torch._inductor.codegen.common import DeviceOpOverrides, register_device_op_overrides
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    import torch
    mod = getattr(torch, device)
    device_type = device

    class Launches:
        """Kernel calls of the device's C++ kernels through the extension's _launch_compiled,
        with the buffers each reads (const pointers) and writes, sorted out here once."""

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                         arg_types=None, **kwargs):
            from torch._inductor.virtualized import V
            dev = device or V.graph.get_current_device_or_throw()
            if triton or dev.type != device_type:
                return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton,
                                                            arg_types=arg_types, **kwargs)
            pointers = [(str(a), str(t).strip()) for a, t in zip(call_args, arg_types or []) if str(t).strip().endswith("*")]
            read = "".join(f"{a}, " for a, t in pointers if t.startswith("const "))
            written = "".join(f"{a}, " for a, t in pointers if not t.startswith("const "))
            args = "".join(f"{a}, " for a in call_args)
            self.writeline(f"_cardsim_launch({kernel_name!r}, {kernel_name}, ({args}), [{read}], [{written}])"
                           f"{self.ending}")

    class Subgraph(Launches, SubgraphPythonWrapperCodegen):
        pass

    class Wrapper(Launches, PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return Subgraph(subgraph_name, parent_wrapper, partition_signatures)
            return Wrapper()

        def write_header(self) -> None:
            super().write_header()
            self.imports.writeline("from cardsim_torch._C import _launch_compiled as _cardsim_launch")

    class NoCppWrapper(CppWrapperCpu):
        @staticmethod
        def create(*args, **kwargs):
            raise NotImplementedError(
                f"torch._inductor.config.cpp_wrapper is not supported on the emulated {device_type} device: its "
                "kernels are launched and timed through Inductor's Python wrapper (set cpp_wrapper = False)")

    class OpOverrides(DeviceOpOverrides):
        # The wrapper sets the device and synchronizes through torch.<device>; the kernels
        # run on the host and take no stream.
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(index): return 0"

        def set_device(self, device_idx: int) -> str:
            return f"torch.{device}.set_device({device_idx})"

        def synchronize(self) -> str:
            return f"torch.{device}.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"torch.{device}.device({device_idx})"

    # Inductor takes its C++ kernels' device to be "cpu" where it picks loop and fusion
    # strategies (the GPU ones assume Triton's kernel groups): the device counts as one.
    from torch._inductor import ir, scheduler

    def is_cpu(x) -> bool:
        return ir.get_device_type(x) in ("cpu", device_type)

    def node_is_cpu(self) -> bool:
        d = self.get_device()
        return d is not None and d.type in ("cpu", device_type)

    ir.is_cpu = is_cpu
    scheduler.BaseSchedulerNode.is_cpu = node_is_cpu
    # ... and the backend generating its code is the CPU's (C++), not the GPUs' (Triton):
    # dtype propagation and fp16 upcasting follow it.
    from torch._inductor import utils as inductor_utils
    from torch._inductor.codegen import common as codegen_common
    from torch._inductor.virtualized import V
    backend_of = inductor_utils.get_current_backend

    def get_current_backend(device: str | None = None) -> str:
        device = device or V.graph.get_current_device_or_throw().type
        return backend_of("cpu" if device == device_type else device)

    for module in (inductor_utils, codegen_common, scheduler):
        if getattr(module, "get_current_backend", None) is backend_of:
            module.get_current_backend = get_current_backend
    register_device_op_overrides(device, OpOverrides())
    register_interface_for_device(device, _interface(device, mod))
    return {"Scheduling": CppScheduling, "PythonWrapperCodegen": Wrapper, "CppWrapperCodegen": NoCppWrapper,
            "WrapperFxCodegen": WrapperFxCodegen}


def _interface(device: str, mod):
    from torch._dynamo.device_interface import DeviceInterface

    class Worker:
        set_device = staticmethod(mod.set_device)
        current_device = staticmethod(mod.current_device)
        get_device_properties = staticmethod(mod.get_device_properties)

    exchange = _exchange(mod)
    return type(f"{device.upper()}Interface", (DeviceInterface,), {
        "device": mod.device, "Event": mod.Event, "Stream": mod.Stream, "Worker": Worker,
        "current_device": staticmethod(mod.current_device), "set_device": staticmethod(mod.set_device),
        "device_count": staticmethod(mod.device_count), "is_available": staticmethod(mod.is_available),
        "stream": staticmethod(mod.stream), "current_stream": staticmethod(mod.current_stream),
        "set_stream": staticmethod(mod.set_stream), "synchronize": staticmethod(mod.synchronize),
        "get_device_properties": staticmethod(mod.get_device_properties),
        "get_raw_stream": staticmethod(lambda index: 0),
        "exchange_device": staticmethod(exchange), "maybe_exchange_device": staticmethod(exchange),
        "memory_allocated": staticmethod(mod.memory_allocated),
        "is_bf16_supported": staticmethod(lambda including_emulation=False: mod.is_bf16_supported()),
        "get_compute_capability": staticmethod(lambda device=None: "cpu"),
        "is_triton_capable": staticmethod(lambda device=None: False),
    })


def _exchange(mod):
    def exchange(index: int) -> int:
        previous = mod.current_device()
        if index >= 0 and index != previous:
            mod.set_device(index)
        return previous
    return exchange


def codegen_tag() -> str:
    """What names this code generator in torch.compile's cache keys: a digest of this file,
    where the generated code's calls into the extension are written. Inductor's caches (the
    FX graph and AOT autograd caches, on disk across processes) key on torch's own sources
    only; without this, a program compiled before a change of this file would load the old
    generated code, whose calls the new extension may no longer take."""
    import hashlib
    with open(__file__, "rb") as f:
        return "cardsim-inductor-" + hashlib.sha256(f.read()).hexdigest()[:16]


def _salt_compile_caches() -> None:
    # torch.compiler.config.cache_key_tag goes into every compile cache key; a tag the user
    # set is kept in front of ours.
    import torch.compiler.config as cconfig
    tag = codegen_tag()
    have = cconfig.cache_key_tag or ""
    if tag not in have.split("|"):
        cconfig.cache_key_tag = f"{have}|{tag}" if have else tag


def attach(mod: types.ModuleType, device: str) -> None:
    """Gives the device module `mod` Inductor's code generators, made at first use, and
    salts torch.compile's cache keys with this code generator (codegen_tag)."""
    _salt_compile_caches()
    made: dict = {}
    previous = mod.__dict__.get("__getattr__")

    def __getattr__(name: str):
        if name in _CODEGEN_NAMES:
            if not made:
                made.update(_codegen_classes(device))
            return made[name]
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module 'torch.{device}' has no attribute '{name}'")

    mod.__getattr__ = __getattr__
