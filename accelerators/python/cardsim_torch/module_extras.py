"""The rest of ``torch.cuda``'s surface on ``torch.<device>``: the ``amp``, ``graphs``,
``streams`` and ``random`` submodules (importable, as ``from torch.mlu.amp import
GradScaler``), the remaining memory functions (per-process memory fraction, host (pinned)
memory statistics, raw allocations from the caching allocator), the synchronization debug
mode, peer access and the management figures torch.cuda reads through NVML (utilization,
memory in use, temperature, power, clock), which here come from the same account of the
system as ``cnmon`` / ``brsmi`` (cardsim_tools.cards).
"""
from __future__ import annotations

import collections
import functools
import types

import torch

_SYNC_MODES = {"default": 0, "warn": 1, "error": 2}


def _nest(flat: dict) -> dict:
    """{"a.b.c": v} -> {"a": {"b": {"c": v}}} (torch.cuda's memory_stats_as_nested_dict)."""
    out: dict = {}
    for key, value in flat.items():
        node = out
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def _flatten(nested: dict, prefix: str = "") -> list:
    items = []
    for k, v in nested.items():
        key = f"{prefix}.{k}" if prefix else k
        items.extend(_flatten(v, key) if isinstance(v, dict) else [(key, v)])
    return items


def extend(p, _C, ns: dict) -> dict:
    """Adds the names below to the module namespace ``ns`` of personality ``p``; returns the
    submodules to register in sys.modules (by their full names)."""
    name = p.device
    dev = ns["_get_device_index"]

    def _index(device=None) -> int:
        return dev(device, optional=True)

    # ---- amp: classes, as torch.cuda.amp's are (isinstance, subclassing) --------------

    class autocast(torch.amp.autocast):
        def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True):
            super().__init__(name, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    class GradScaler(torch.amp.GradScaler):
        def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                     growth_interval: int = 2000, enabled: bool = True):
            super().__init__(name, init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

    amp = types.ModuleType(f"torch.{name}.amp", f"Automatic mixed precision on the emulated {name.upper()}.")
    amp.autocast, amp.GradScaler = autocast, GradScaler
    amp.custom_fwd = functools.partial(torch.amp.custom_fwd, device_type=name)
    amp.custom_bwd = functools.partial(torch.amp.custom_bwd, device_type=name)
    for cls in (autocast, GradScaler):
        cls.__module__ = amp.__name__
        cls.__qualname__ = cls.__name__

    # ---- submodules with names that live on the module itself -------------------------

    def submodule(sub: str, names: list[str]) -> types.ModuleType:
        m = types.ModuleType(f"torch.{name}.{sub}")
        for n in names:
            setattr(m, n, ns[n])
        return m

    graphs = submodule("graphs", ["graph", "graph_pool_handle", "is_current_stream_capturing",
                                  "make_graphed_callables", p.graph_class])
    streams = submodule("streams", ["Stream", "ExternalStream", "Event"])
    random = submodule("random", ["get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
                                  "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"])

    # ---- memory ------------------------------------------------------------------------

    def memory_stats_as_nested_dict(device=None) -> dict:
        return _nest(_C._memory_stats(_index(device)))

    def set_per_process_memory_fraction(fraction: float, device=None) -> None:
        """The caching allocator holds at most ``fraction`` (0..1) of the device's memory;
        an allocation past it fails with torch.OutOfMemoryError (after the cache is freed)."""
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
            raise TypeError(f"invalid type for fraction: {type(fraction).__name__} (expected a float)")
        _C._set_memory_fraction(float(fraction), _index(device))

    def get_per_process_memory_fraction(device=None) -> float:
        return _C._memory_fraction(_index(device))

    raw_blocks: dict[int, torch.Tensor] = {}

    def caching_allocator_alloc(size: int, device=None, stream=None) -> int:
        """Allocates ``size`` bytes from the caching allocator (on ``stream``, or the current
        stream) and returns the address; free it with caching_allocator_delete."""
        idx = _index(device)
        with ns["device"](idx):
            ctx = ns["stream"](stream) if stream is not None else ns["StreamContext"](None)
            with ctx:
                block = torch.empty(int(size), dtype=torch.uint8, device=torch.device(name, idx))
        ptr = block.data_ptr()
        raw_blocks[ptr] = block
        return ptr

    def caching_allocator_delete(mem_ptr: int) -> None:
        if raw_blocks.pop(int(mem_ptr), None) is None:
            raise ValueError(f"caching_allocator_delete: {int(mem_ptr):#x} was not allocated by "
                             f"torch.{name}.caching_allocator_alloc (or was freed already)")

    def host_memory_stats_as_nested_dict() -> dict:
        return _C._host_memory_stats() if _C._is_initialized() else {}

    def host_memory_stats() -> "collections.OrderedDict[str, int]":
        return collections.OrderedDict(sorted(_flatten(host_memory_stats_as_nested_dict())))

    def reset_accumulated_host_memory_stats() -> None:
        _C._reset_host_memory_stats(False)

    def reset_peak_host_memory_stats() -> None:
        _C._reset_host_memory_stats(True)

    def get_allocator_backend() -> str:
        return "native"

    def list_gpu_processes(device=None) -> str:
        """The processes using the device, as cnmon/brsmi see them (this process included)."""
        card = _card(device)
        lines = [f"{name.upper()}:{_index(device)}"]
        if not card or not card.processes:
            lines.append("no processes are running")
        for proc in (card.processes if card else []):
            lines.append(f"process {proc.pid:>10d} uses {proc.used_bytes / (1 << 20):>12.3f} MB {name.upper()} memory")
        return "\n".join(lines)

    # ---- peers, sync debugging, IPC ----------------------------------------------------

    def can_device_access_peer(device, peer_device) -> bool:
        """Whether ``device`` can address ``peer_device``'s memory directly: any two distinct
        devices of this process can (peer copies run over the fabric or the host link)."""
        a, b = _index(device), _index(peer_device)
        count = ns["device_count"]()
        for d in (a, b):
            if not 0 <= d < count:
                raise AssertionError(f"Invalid {name} device index {d}: {count} device(s) visible")
        return a != b

    def set_sync_debug_mode(debug_mode) -> None:
        """0/"default": nothing; 1/"warn": a warning, 2/"error": an error whenever an
        operator makes the host wait for the card (a blocking copy, .item(), nonzero)."""
        if isinstance(debug_mode, str):
            if debug_mode not in _SYNC_MODES:
                raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected one of "
                                   f"{', '.join(_SYNC_MODES)}")
            debug_mode = _SYNC_MODES[debug_mode]
        _C._set_sync_debug_mode(int(debug_mode))

    def get_sync_debug_mode() -> int:
        return _C._sync_debug_mode()

    def ipc_collect() -> None:
        """Nothing to collect: no memory of this process is shared with another by IPC."""

    # ---- management figures (torch.cuda reads them through NVML) ------------------------

    def _card(device=None):
        from cardsim_tools import cards
        physical = cards.physical_index(p.visible_env, _index(device))
        system = cards.system(p.default_preset)
        return system[physical] if 0 <= physical < len(system) else None

    def _card_or_error(device):
        card = _card(device)
        if card is None:
            raise RuntimeError(f"{name}:{_index(device)} is not in the system cnmon/brsmi show")
        return card

    def utilization(device=None) -> int:
        """Percent of the last sampling period the card was busy (as cnmon/brsmi show it)."""
        return _card_or_error(device).util_percent

    def memory_usage(device=None) -> int:
        """Percent of the last sampling period during which the card's memory was read or
        written (as torch.cuda.memory_usage gives NVML's), from the same sample."""
        return _card_or_error(device).memory_util_percent

    def device_memory_used(device=None) -> int:
        return _card_or_error(device).used_bytes

    def temperature(device=None) -> int:
        return _card_or_error(device).temperature_c

    def power_draw(device=None) -> int:
        """Milliwatts, as torch.cuda.power_draw."""
        return _card_or_error(device).power_w * 1000

    def clock_rate(device=None) -> int:
        """The card's clock in MHz."""
        return int(ns["get_device_properties"](device).clock_hz // 1_000_000)

    added = dict(
        OutOfMemoryError=torch.OutOfMemoryError, amp=amp, graphs=graphs, streams=streams, random=random,
        memory_stats_as_nested_dict=memory_stats_as_nested_dict,
        set_per_process_memory_fraction=set_per_process_memory_fraction,
        get_per_process_memory_fraction=get_per_process_memory_fraction,
        caching_allocator_alloc=caching_allocator_alloc, caching_allocator_delete=caching_allocator_delete,
        host_memory_stats=host_memory_stats, host_memory_stats_as_nested_dict=host_memory_stats_as_nested_dict,
        reset_accumulated_host_memory_stats=reset_accumulated_host_memory_stats,
        reset_peak_host_memory_stats=reset_peak_host_memory_stats, get_allocator_backend=get_allocator_backend,
        list_gpu_processes=list_gpu_processes, can_device_access_peer=can_device_access_peer,
        set_sync_debug_mode=set_sync_debug_mode, get_sync_debug_mode=get_sync_debug_mode, ipc_collect=ipc_collect,
        utilization=utilization, memory_usage=memory_usage, device_memory_used=device_memory_used,
        temperature=temperature, power_draw=power_draw, clock_rate=clock_rate,
    )
    ns.update(added)
    memory_names = ["memory_stats_as_nested_dict", "set_per_process_memory_fraction",
                    "get_per_process_memory_fraction", "caching_allocator_alloc", "caching_allocator_delete",
                    "host_memory_stats", "host_memory_stats_as_nested_dict", "reset_accumulated_host_memory_stats",
                    "reset_peak_host_memory_stats", "get_allocator_backend", "list_gpu_processes"]
    for n in memory_names:
        setattr(ns["memory"], n, added[n])
    ns["memory"].is_initialized = ns["is_initialized"]
    return {m.__name__: m for m in (amp, graphs, streams, random, ns["memory"])}

