"""Builds ``torch.<device>``: the torch.cuda-like module of a personality."""
from __future__ import annotations

import collections
import contextlib
import functools
import gc
import itertools
import random
import threading
import types
import warnings
from typing import Any

import torch


from . import checker as _checker
from . import in_flight as _in_flight

_graph_pool_ids = itertools.count(1)


def build(p, _C) -> types.ModuleType:
    name = p.device
    mod = types.ModuleType(f"torch.{name}", f"The emulated {name.upper()} device (cardsim).")

    # ---- devices ---------------------------------------------------------------------

    def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if allow_cpu and device.type == "cpu":
                return -1
            if device.type != name:
                raise ValueError(f"expected a {name} device, got {device}")
            if device.index is None:
                if optional:
                    return current_device()
                raise ValueError(f"expected a {name} device with an index, got {device}")
            return device.index
        if device is None:
            if optional:
                return current_device()
            raise ValueError(f"expected a {name} device, got None")
        if isinstance(device, bool) or not isinstance(device, int):
            raise TypeError(f"invalid {name} device {device!r}: expected an int, str or torch.device")
        return device

    def _dev(device) -> int:
        """The index of `device`; None means the current device."""
        return _get_device_index(device, optional=True)

    def is_available() -> bool:
        try:
            return _C._device_count() > 0
        except Exception:
            return False

    def device_count() -> int:
        # A bad configuration (preset, key, visible-devices variable) is an error naming it,
        # not torch.cuda's silent 0: is_available() is the query that never raises.
        return _C._device_count()

    def current_device() -> int:
        return _C._current_device()

    def set_device(device) -> None:
        idx = _dev(device)
        if idx >= 0:
            _C._set_device(idx)

    class device:
        """Context manager that changes the current device."""

        def __init__(self, device):
            self.idx = _get_device_index(device, optional=True) if device is not None else -1
            self.prev_idx = -1

        def __enter__(self):
            if self.idx >= 0:
                self.prev_idx = current_device()
                if self.prev_idx != self.idx:
                    _C._set_device(self.idx)
            return self

        def __exit__(self, *exc):
            if self.idx >= 0 and self.prev_idx != self.idx:
                _C._set_device(self.prev_idx)
            return False

    class device_of(device):
        """Context manager: the current device becomes the given tensor's device."""

        def __init__(self, obj):
            idx = obj.get_device() if obj.device.type == name else -1
            super().__init__(idx)

    def _finish_in_flight() -> None:
        # A collective's bytes are the card's once the work a synchronize waits for is done:
        # gathers whose host side ends later (in_flight) end here, at the program's order.
        if _in_flight.any_in_flight():
            _in_flight.finish_all()

    def synchronize(device=None) -> None:
        _finish_in_flight()
        _C._synchronize(_dev(device))

    class _DeviceProperties:
        def __init__(self, d: dict):
            index = d.pop("_index", 0)
            self.__dict__.update(d)
            self.multi_processor_count = d["cluster_count"]
            self.clock_rate = int(d["clock_hz"] / 1000)   # kHz, as torch.cuda reports
            self.is_integrated = False
            self.is_multi_gpu_board = False
            # As the management tools (cnmon, brsmi) show the card: its UUID and PCI address.
            from cardsim_tools import cards
            physical = cards.physical_index(p.visible_env, index)
            self.uuid = cards.card_uuid(d["preset"], physical)
            self.pci_domain_id, self.pci_bus_id, self.pci_device_id = cards.pci_address(physical)

        def __repr__(self):
            return (f"_{name.upper()}DeviceProperties(name='{self.name}', major={self.major}, "
                    f"minor={self.minor}, total_memory={self.total_memory // (1 << 20)}MB, "
                    f"cluster_count={self.cluster_count}, preset='{self.preset}')")

    def get_device_properties(device=None) -> _DeviceProperties:
        idx = _dev(device)
        if idx < 0:
            raise AssertionError(f"Invalid {name} device id {idx}")
        props = _C._device_properties(idx)
        props["_index"] = idx
        return _DeviceProperties(props)

    def get_device_name(device=None) -> str:
        return get_device_properties(device).name

    def get_device_capability(device=None) -> tuple[int, int]:
        pr = get_device_properties(device)
        return pr.major, pr.minor

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return get_device_properties().peak_bf16_flops > 0

    def get_amp_supported_dtype():
        dtypes = [torch.float16]
        if is_bf16_supported():
            dtypes.append(torch.bfloat16)
        return dtypes

    def init() -> None:
        _C._device_count()

    def is_initialized() -> bool:
        return _C._is_initialized()

    def _lazy_init() -> None:
        init()

    def _lazy_call(callable, **kwargs) -> None:
        callable()

    def _is_in_bad_fork() -> bool:
        return False

    # ---- random numbers --------------------------------------------------------------

    def _generator(device=None) -> torch.Generator:
        return _C._default_generator(_dev(device))

    class _DefaultGenerators(collections.abc.Sequence):
        def __getitem__(self, i):
            if isinstance(i, slice):
                return tuple(_generator(j) for j in range(device_count())[i])
            n = device_count()
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"default_generators: index out of range ({n} devices)")
            return _generator(i)

        def __len__(self):
            return device_count()

        def __repr__(self):
            return repr(tuple(self))

    def manual_seed(seed) -> None:
        _generator().manual_seed(int(seed))

    def manual_seed_all(seed) -> None:
        for i in range(device_count()):
            _generator(i).manual_seed(int(seed))

    def seed() -> None:
        _generator().seed()

    def seed_all() -> None:
        s = random.getrandbits(63)
        manual_seed_all(s)

    def initial_seed() -> int:
        return _generator().initial_seed()

    def get_rng_state(device="%s" % name) -> torch.Tensor:
        return _generator(device).get_state()

    def set_rng_state(new_state: torch.Tensor, device="%s" % name) -> None:
        _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format).cpu())

    def get_rng_state_all():
        return [get_rng_state(i) for i in range(device_count())]

    def set_rng_state_all(new_states) -> None:
        for i, s in enumerate(new_states):
            set_rng_state(s, i)

    # ---- streams and events ----------------------------------------------------------

    class _FinishesInFlight:
        """A stream's or event's synchronize, and a query that finds its work done, finish
        the gathers in flight, as a device synchronize does."""

        def synchronize(self) -> None:
            _finish_in_flight()
            super().synchronize()

        def query(self) -> bool:
            done = super().query()
            if done:   # a program that polls, then reads, finds the bytes there
                _finish_in_flight()
            return done

    class Stream(_FinishesInFlight, torch.Stream):
        """An in-order queue of work on one device (torch.cuda.Stream semantics)."""

        def __new__(cls, device=None, priority=0, **kwargs):
            if kwargs.get("stream_id") is not None:
                return super().__new__(cls, stream_id=kwargs["stream_id"],
                                       device_index=kwargs["device_index"],
                                       device_type=kwargs["device_type"])
            idx = _dev(device)
            return super().__new__(cls, device=torch.device(name, idx), priority=priority)

        def wait_event(self, event) -> None:
            event.wait(self)

        def wait_stream(self, stream) -> None:
            self.wait_event(stream.record_event())

        def record_event(self, event=None):
            if event is None:
                event = Event()
            event.record(self)
            return event

        @property
        def priority(self) -> int:
            return _C._stream_priority(self.stream_id, self.device_index)

        def __repr__(self):
            return f"<torch.{name}.Stream device={name}:{self.device_index} stream_id={self.stream_id}>"

    class ExternalStream(Stream):
        pass

    def _wrap_stream(t) -> Stream:
        sid, didx, dtype = t
        return Stream(stream_id=sid, device_index=didx, device_type=dtype)

    def current_stream(device=None) -> Stream:
        return _wrap_stream(_C._current_stream(_dev(device)))

    def default_stream(device=None) -> Stream:
        return _wrap_stream(_C._default_stream(_dev(device)))

    def set_stream(stream) -> None:
        """Makes `stream` current on its device, and that device current (as torch.cuda)."""
        if stream is None:
            return
        set_device(stream.device_index)
        _C._set_stream(stream.stream_id, stream.device_index)

    class StreamContext:
        """Makes `stream` the current stream of its device (and that device current)."""

        def __init__(self, stream):
            self.stream = stream
            self.idx = stream.device_index if stream is not None else -1
            self.src_prev_stream = None
            self.dst_prev_stream = None

        def __enter__(self):
            cur = self.stream
            if cur is None or self.idx == -1:
                return
            self.src_prev_stream = current_stream(None)
            if self.src_prev_stream.device_index != cur.device_index:
                with device(cur.device_index):
                    self.dst_prev_stream = current_stream(cur.device_index)
            set_device(cur.device_index)
            set_stream(cur)

        def __exit__(self, *exc):
            cur = self.stream
            if cur is None or self.idx == -1:
                return
            if self.src_prev_stream.device_index != cur.device_index:
                set_stream(self.dst_prev_stream)
            set_device(self.src_prev_stream.device_index)
            set_stream(self.src_prev_stream)

    def stream(stream) -> StreamContext:
        return StreamContext(stream)

    class Event(_FinishesInFlight, torch.Event):
        """A marker in a stream; elapsed_time() is in simulated milliseconds."""

        def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
            return super().__new__(cls, device=torch.device(name, current_device()),
                                   enable_timing=enable_timing, blocking=blocking,
                                   interprocess=interprocess)

        def record(self, stream=None) -> None:
            if stream is None:
                stream = current_stream()
            super().record(stream)

        def wait(self, stream=None) -> None:
            if stream is None:
                stream = current_stream()
            super().wait(stream)

        def elapsed_time(self, end_event) -> float:
            """Simulated milliseconds between this event and `end_event`."""
            return _C._event_elapsed_time(self.event_id, end_event.event_id)

        def __repr__(self):
            return f"<torch.{name}.Event {self.event_id:#x}>"

    # ---- memory ----------------------------------------------------------------------

    def memory_stats(device=None) -> "collections.OrderedDict[str, Any]":
        stats = _C._memory_stats(_dev(device))
        return collections.OrderedDict(sorted(stats.items()))

    def memory_allocated(device=None) -> int:
        return _C._memory_stats(_dev(device))["allocated_bytes.all.current"]

    def max_memory_allocated(device=None) -> int:
        return _C._memory_stats(_dev(device))["allocated_bytes.all.peak"]

    def memory_reserved(device=None) -> int:
        return _C._memory_stats(_dev(device))["reserved_bytes.all.current"]

    def max_memory_reserved(device=None) -> int:
        return _C._memory_stats(_dev(device))["reserved_bytes.all.peak"]

    def reset_peak_memory_stats(device=None) -> None:
        _C._reset_peak_memory_stats(_dev(device))

    def reset_accumulated_memory_stats(device=None) -> None:
        _C._reset_accumulated_memory_stats(_dev(device))

    def reset_max_memory_allocated(device=None) -> None:
        warnings.warn(f"torch.{name}.reset_max_memory_allocated now calls "
                      f"torch.{name}.reset_peak_memory_stats, which resets all peak statistics",
                      FutureWarning)
        reset_peak_memory_stats(device)

    def memory_cached(device=None) -> int:
        warnings.warn(f"torch.{name}.memory_cached has been renamed to torch.{name}.memory_reserved",
                      FutureWarning)
        return memory_reserved(device)

    def max_memory_cached(device=None) -> int:
        warnings.warn(f"torch.{name}.max_memory_cached has been renamed to "
                      f"torch.{name}.max_memory_reserved", FutureWarning)
        return max_memory_reserved(device)

    def reset_max_memory_cached(device=None) -> None:
        warnings.warn(f"torch.{name}.reset_max_memory_cached now calls "
                      f"torch.{name}.reset_peak_memory_stats, which resets all peak statistics",
                      FutureWarning)
        reset_peak_memory_stats(device)

    def empty_cache() -> None:
        _C._empty_cache()

    def mem_get_info(device=None) -> tuple[int, int]:
        return tuple(_C._mem_get_info(_dev(device)))

    def memory_summary(device=None, abbreviated: bool = False) -> str:
        return _C._memory_summary(_dev(device))

    # ---- legacy tensor types ---------------------------------------------------------

    class _LegacyTypeMeta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, torch.Tensor) and obj.device.type == name and obj.dtype == cls.dtype

    def _legacy(type_name: str, dtype: torch.dtype):
        def __new__(cls, *args, **kwargs):
            if len(args) == 1 and isinstance(args[0], (list, tuple)) or (
                    len(args) == 1 and isinstance(args[0], torch.Tensor)):
                return torch.tensor(args[0], dtype=dtype, device=torch.device(name, current_device()))
            if all(isinstance(a, int) for a in args):   # sizes: FloatTensor(2, 3)
                return torch.empty(args, dtype=dtype, device=torch.device(name, current_device()))
            raise TypeError(f"torch.{name}.{type_name}: expected a list or sizes, got {args!r}")
        return _LegacyTypeMeta(type_name, (), {"__new__": __new__, "dtype": dtype,
                                               "__module__": f"torch.{name}"})

    legacy = {
        "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
        "BFloat16Tensor": torch.bfloat16, "IntTensor": torch.int32, "LongTensor": torch.int64,
        "ShortTensor": torch.int16, "CharTensor": torch.int8, "ByteTensor": torch.uint8,
        "BoolTensor": torch.bool,
    }

    # ---- graphs ----------------------------------------------------------------------

    class Graph:
        """Records the work queued on a stream, to replay it with the card's lower
        per-kernel dispatch cost (torch.cuda.CUDAGraph semantics, straight-line work)."""

        def __init__(self, keep_graph: bool = False):
            self._g = _C._Graph()
            self._pool = None
            self._keep_graph = keep_graph

        def instantiate(self):
            """A captured graph replays as captured: there is no separate executable to build
            (keep_graph=True, as on CUDA, leaves the call to the user; replay() works either way)."""
            if self._g.node_count() == 0 and not getattr(self, "_captured", False):
                raise RuntimeError(f"{type(self).__name__}.instantiate(): nothing was captured")

        def capture_begin(self, pool=None, capture_error_mode: str = "global"):
            if capture_error_mode not in ("global", "thread_local", "relaxed", "default"):
                raise ValueError(f"capture_error_mode must be 'global', 'thread_local' or 'relaxed', "
                                 f"got {capture_error_mode!r}")
            s = current_stream()
            self._pool = pool if pool is not None else graph_pool_handle()
            self._g.capture_begin(s.stream_id, s.device_index, capture_error_mode)

        def capture_end(self):
            self._g.capture_end()
            self._captured = True

        def replay(self):
            s = current_stream()
            if (c := _checker.active()) is None:
                self._g.replay(s.stream_id, s.device_index)
                return
            c.site_here(f"{type(self).__name__}.replay()")   # the replay's uses are checked at its site
            try:
                self._g.replay(s.stream_id, s.device_index)
            finally:
                c.site_here(None)

        def reset(self):
            self._g.reset()

        def pool(self):
            return self._pool

        def node_count(self) -> int:
            return self._g.node_count()

        def enable_debug_mode(self):
            """Keeps what debug_dump writes (as on CUDA, call it before capturing)."""
            self._debug = True

        def debug_dump(self, path):
            """Writes the captured graph as a Graphviz DOT file: one node per captured kernel,
            copy, memset, event or host step, in replay order, with its stream and cost."""
            if not getattr(self, "_debug", False):
                warnings.warn(f"{type(self).__name__} debug mode is not enabled; call "
                              f"enable_debug_mode() before capturing to dump the graph", stacklevel=2)
                return
            from . import graphed
            graphed.write_dot(type(self).__name__, self._g.describe(), path)

    Graph.__name__ = Graph.__qualname__ = p.graph_class

    def graph_pool_handle():
        return (next(_graph_pool_ids), 0)

    _capture_streams: dict[int, Stream] = {}

    class graph:
        """Context manager: captures the work inside into `graph` on a side stream."""
        def __init__(self, graph_obj, pool=None, stream=None, capture_error_mode: str = "global"):
            idx = current_device()
            if stream is None:
                if idx not in _capture_streams:
                    _capture_streams[idx] = Stream()
                stream = _capture_streams[idx]
            self.capture_stream = stream
            self.graph = graph_obj
            self.pool = pool
            self.capture_error_mode = capture_error_mode
            self.stream_ctx = StreamContext(stream)

        def __enter__(self):
            synchronize()
            gc.collect()
            self.stream_ctx.__enter__()
            self.graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

        def __exit__(self, *exc):
            try:
                self.graph.capture_end()
            finally:
                self.stream_ctx.__exit__(*exc)
            return False

    def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3,
                               allow_unused_input: bool = False, pool=None):
        """Graphs the forward and backward of callables (see cardsim_torch.graphed)."""
        from . import graphed
        api = types.SimpleNamespace(Graph=Graph, graph=graph, graph_pool_handle=graph_pool_handle,
                                    synchronize=synchronize, current_stream=current_stream, Stream=Stream,
                                    StreamContext=StreamContext)
        return graphed.make_graphed_callables(api, callables, sample_args, num_warmup_iters, allow_unused_input,
                                              pool)

    def is_current_stream_capturing() -> bool:
        sid, didx, _ = _C._current_stream(_dev(None))   # no Stream object: collectives ask per call
        return _C._is_stream_capturing(sid, didx)

    # ---- profiler ranges (cnpx / nvtx-like) ------------------------------------------

    _ranges = threading.local()

    def _range_stack():
        if not hasattr(_ranges, "stack"):
            _ranges.stack = []
        return _ranges.stack

    prof = types.ModuleType(f"torch.{name}.{p.profiler_module or 'nvtx'}")

    def range_push(msg: str) -> int:
        st = _range_stack()
        st.append(str(msg))
        return len(st) - 1

    def range_pop() -> int:
        st = _range_stack()
        if not st:
            return -1
        st.pop()
        return len(st)

    def mark(msg: str) -> None:
        _range_stack()

    @contextlib.contextmanager
    def range_ctx(msg: str, *args, **kwargs):
        range_push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            range_pop()

    prof.range_push, prof.range_pop, prof.mark, prof.range = range_push, range_pop, mark, range_ctx

    # ---- amp -------------------------------------------------------------------------

    # torch.<device>.amp: module_extras

    def get_autocast_dtype():
        return torch.get_autocast_dtype(name)

    def is_autocast_enabled():
        return torch.is_autocast_enabled(name)

    # ---- cardsim extras --------------------------------------------------------------

    def host_time_ns() -> float:
        """This thread's simulated host clock, in nanoseconds."""
        return _C._host_time_ns()

    def fallback_operators() -> list[str]:
        """Operators that ran through the generic CPU fallback so far."""
        return list(_C._fallback_operators())

    # ---- the vendor runtime's handle (host memory registration) ----------------------

    def check_error(code) -> None:
        """Raises RuntimeError for a nonzero runtime status code."""
        code = int(code)
        if code != 0:
            raise RuntimeError(f"{name} runtime error {code}: {_C._error_string(code)}")

    runtime_ns = {}
    if p.runtime_api:
        accessor, reg_name, unreg_name = p.runtime_api
        rt = types.SimpleNamespace()
        setattr(rt, reg_name, lambda addr, nbytes, flags=0: _C._host_register(int(addr), int(nbytes)))
        setattr(rt, unreg_name, lambda addr: _C._host_unregister(int(addr)))
        runtime_ns[accessor] = lambda: rt

    utils = types.ModuleType(f"torch.{name}._utils")
    utils._get_device_index = _get_device_index

    from . import execution_mode, set_execution_mode
    from .trace import record_trace, start_trace, stop_trace, trace_path

    ns = dict(
        execution_mode=execution_mode, set_execution_mode=set_execution_mode,
        is_available=is_available, device_count=device_count, current_device=current_device,
        set_device=set_device, device=device, device_of=device_of, synchronize=synchronize,
        get_device_properties=get_device_properties, get_device_name=get_device_name,
        get_device_capability=get_device_capability, is_bf16_supported=is_bf16_supported,
        get_amp_supported_dtype=get_amp_supported_dtype, init=init, is_initialized=is_initialized,
        _lazy_init=_lazy_init, _lazy_call=_lazy_call, _is_in_bad_fork=_is_in_bad_fork,
        manual_seed=manual_seed, manual_seed_all=manual_seed_all, seed=seed, seed_all=seed_all,
        initial_seed=initial_seed, get_rng_state=get_rng_state, set_rng_state=set_rng_state,
        get_rng_state_all=get_rng_state_all, set_rng_state_all=set_rng_state_all,
        default_generators=_DefaultGenerators(),
        Stream=Stream, ExternalStream=ExternalStream, Event=Event, current_stream=current_stream,
        default_stream=default_stream, set_stream=set_stream, StreamContext=StreamContext,
        stream=stream,
        memory_stats=memory_stats, memory_allocated=memory_allocated,
        max_memory_allocated=max_memory_allocated, memory_reserved=memory_reserved,
        max_memory_reserved=max_memory_reserved, reset_peak_memory_stats=reset_peak_memory_stats,
        reset_accumulated_memory_stats=reset_accumulated_memory_stats,
        reset_max_memory_allocated=reset_max_memory_allocated, memory_cached=memory_cached,
        max_memory_cached=max_memory_cached, reset_max_memory_cached=reset_max_memory_cached,
        empty_cache=empty_cache, mem_get_info=mem_get_info, memory_summary=memory_summary,
        graph=graph, graph_pool_handle=graph_pool_handle,
        is_current_stream_capturing=is_current_stream_capturing, make_graphed_callables=make_graphed_callables,
        get_autocast_dtype=get_autocast_dtype, is_autocast_enabled=is_autocast_enabled,
        host_time_ns=host_time_ns, fallback_operators=fallback_operators, _utils=utils,
        record_trace=record_trace, start_trace=start_trace, stop_trace=stop_trace, trace_path=trace_path,
        _get_device_index=_get_device_index,
    )
    from . import memory_history
    memory = memory_history.build(name, _C, {k: ns[k] for k in (
        "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "reset_peak_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
        "memory_cached", "max_memory_cached", "reset_max_memory_cached", "empty_cache", "mem_get_info",
        "memory_summary")})
    ns.update(memory=memory, memory_snapshot=memory.memory_snapshot)
    ns[p.graph_class] = Graph
    ns["async_check"] = lambda raise_errors=False: _checker.async_check(_C, name, raise_errors)
    ns["async_check"].__doc__ = _checker.async_check.__doc__
    ns["AsyncCheckError"] = _checker.AsyncCheckError
    ns["check_error"] = check_error
    ns.update(runtime_ns)
    ns[p.profiler_module or "nvtx"] = prof
    ns.update({k: _legacy(k, v) for k, v in legacy.items()})
    ns[f"_{name.upper()}DeviceProperties"] = _DeviceProperties
    from . import module_extras
    mod._submodules = module_extras.extend(p, _C, ns)
    from . import inductor
    inductor.attach(mod, name)
    for k, v in ns.items():
        setattr(mod, k, v)
    for cls in (Stream, ExternalStream, Event, StreamContext, device, device_of, graph, Graph):
        cls.__module__ = f"torch.{name}"
        cls.__qualname__ = cls.__name__
    mod.__all__ = sorted(k for k in ns if not k.startswith("_"))
    return mod
