"""The public surface of torch.<card> (torch.mlu / torch.supa), checked against the
semantics of torch.cuda. Every test is written against the `dm`/`card` fixtures, so the
file passes for CARDSIM_TEST_CARD=mlu and CARDSIM_TEST_CARD=supa."""
import collections
import io

import pytest
import torch

# Default presets of the two personalities (mlu370-x8 and br100).
EXPECTED = {
    "mlu": dict(name="MLU370-X8", preset="mlu370-x8", total_memory=23374 << 20,
                capability=(3, 0), clusters=8, graph="MLUGraph"),
    "supa": dict(name="BR100", preset="br100", total_memory=65536 << 20,
                 capability=(1, 0), clusters=32, graph="SUPAGraph"),
}
GRANULARITY = 512   # the caching allocator rounds block sizes up to 512 bytes
INVALID_INDEX_ERRORS = (IndexError, RuntimeError, AssertionError, ValueError)




def graph_class(dm, card):
    return getattr(dm, EXPECTED[card]["graph"])


# ---- devices -------------------------------------------------------------------------

def test_is_available_and_device_count(dm):
    """The card is available with the default 8 devices."""
    assert dm.is_available() is True
    assert dm.device_count() == 8
    assert dm.current_device() == 0


def test_device_module_is_registered(dm, card):
    """torch.<card> is the module PyTorch knows for the device type."""
    assert torch.get_device_module(card) is dm
    assert getattr(torch, card) is dm
    assert torch.accelerator.current_accelerator() == torch.device(card)
    assert torch.accelerator.device_count() == 8


@pytest.mark.parametrize("form", ["int", "str", "device"])
def test_set_device_forms(dm, card, form):
    """set_device accepts an int, a '<card>:1' string and a torch.device."""
    arg = {"int": 1, "str": f"{card}:1", "device": torch.device(card, 1)}[form]
    dm.set_device(arg)
    assert dm.current_device() == 1
    t = torch.empty(3, device=card)
    assert t.device == torch.device(card, 1)
    assert torch.ones(1, device=card).get_device() == 1
    dm.set_device(0)
    assert torch.empty(1, device=card).device == torch.device(card, 0)


def test_set_device_negative_is_noop(dm):
    """As in torch.cuda, a negative index leaves the current device alone."""
    dm.set_device(2)
    dm.set_device(-1)
    assert dm.current_device() == 2


def test_set_device_rejects_other_device_types(dm):
    """A cpu device or a float is not a device of this card."""
    with pytest.raises(ValueError):
        dm.set_device("cpu")
    with pytest.raises(TypeError):
        dm.set_device(1.5)
    assert dm.current_device() == 0


def test_device_context_nests_and_restores(dm, card):
    """device(...) switches the current device and restores it, nested too."""
    with dm.device(3):
        assert dm.current_device() == 3
        assert torch.empty(1, device=card).get_device() == 3
        with dm.device(f"{card}:5"):
            assert dm.current_device() == 5
            with dm.device(torch.device(card, 6)):
                assert dm.current_device() == 6
            assert dm.current_device() == 5
        assert dm.current_device() == 3
    assert dm.current_device() == 0


def test_device_context_restores_on_exception(dm):
    """The previous device comes back when the body raises."""
    with pytest.raises(KeyError):
        with dm.device(4):
            raise KeyError("boom")
    assert dm.current_device() == 0


@pytest.mark.parametrize("arg", [-1, None])
def test_device_context_noop(dm, arg):
    """device(-1) and device(None) leave the current device as is."""
    dm.set_device(2)
    with dm.device(arg):
        assert dm.current_device() == 2
    assert dm.current_device() == 2


def test_device_of(dm, card):
    """device_of(t) makes t's device current; a CPU tensor changes nothing."""
    t = torch.zeros(2, device=f"{card}:4")
    with dm.device_of(t):
        assert dm.current_device() == 4
    assert dm.current_device() == 0
    with dm.device_of(torch.zeros(2)):
        assert dm.current_device() == 0


def test_synchronize_forms(dm, card):
    """synchronize(None | index | string) waits for the work of the device."""
    x = torch.randn(256, 256, device=card)
    y = x @ x
    dm.synchronize()
    dm.synchronize(0)
    dm.synchronize(f"{card}:1")
    assert dm.current_stream().query() is True
    assert torch.allclose(y.cpu(), x.cpu() @ x.cpu(), atol=1e-3)


def test_get_device_properties(dm, card):
    """Properties of the default preset; None means the current device."""
    exp = EXPECTED[card]
    p = dm.get_device_properties()
    assert p.name == exp["name"]
    assert p.preset == exp["preset"]
    assert p.backend == "sim"
    assert p.total_memory == exp["total_memory"]
    assert p.total_memory == dm.mem_get_info()[1]
    assert (p.major, p.minor) == dm.get_device_capability() == exp["capability"]
    assert p.multi_processor_count == p.cluster_count == exp["clusters"]
    assert p.multi_processor_count > 0
    assert p.clock_rate == int(p.clock_hz / 1000)
    assert exp["name"] in repr(p)
    with dm.device(2):
        q = dm.get_device_properties(None)
    assert q.name == p.name and q.total_memory == p.total_memory
    r = dm.get_device_properties(f"{card}:1")
    assert r.name == p.name
    assert dm.get_device_properties(torch.device(card, 7)).total_memory == p.total_memory


def test_get_device_name_and_capability(dm, card):
    """get_device_name/get_device_capability agree with the properties."""
    assert dm.get_device_name() == EXPECTED[card]["name"]
    assert dm.get_device_name(3) == EXPECTED[card]["name"]
    assert dm.get_device_capability(1) == EXPECTED[card]["capability"]


def test_bf16_and_amp_dtypes(dm):
    """Both presets have bf16 units: fp16 and bf16 are AMP dtypes."""
    assert dm.is_bf16_supported() is True
    assert dm.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


# ---- invalid device indices ------------------------------------------------------------

def test_set_device_invalid_index(dm):
    """set_device(99) fails naming the index and keeps the current device."""
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b99\b"):
        dm.set_device(99)
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b8\b"):
        dm.set_device(8)
    assert dm.current_device() == 0


def test_tensor_on_invalid_device(card):
    """Allocating on '<card>:99' (or ':-2') fails naming the index."""
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b99\b"):
        torch.empty(1, device=f"{card}:99")
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"-2"):
        torch.empty(1, device=f"{card}:-2")
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b8\b"):
        torch.ones(1).to(torch.device(card, 8))


def test_get_device_properties_invalid_index(dm):
    """get_device_properties(99) fails naming the index."""
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b99\b"):
        dm.get_device_properties(99)


def test_other_calls_reject_invalid_index(dm):
    """Memory and stream calls reject index 99 too."""
    for f in (dm.memory_allocated, dm.synchronize, dm.current_stream, dm.get_rng_state):
        with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b99\b"):
            f(99)
    with pytest.raises(INVALID_INDEX_ERRORS, match=r"\b99\b"):
        with dm.device(99):
            pass
    assert dm.current_device() == 0


def test_get_device_properties_negative_index(dm):
    """A negative index is not a device (torch.cuda raises)."""
    with pytest.raises(INVALID_INDEX_ERRORS):
        dm.get_device_properties(-2)


def test_memory_stats_negative_index(dm):
    """memory_stats(-2) is rejected as in torch.cuda."""
    with pytest.raises(INVALID_INDEX_ERRORS, match="-2"):
        dm.memory_stats(-2)


# ---- random numbers --------------------------------------------------------------------

def test_manual_seed_reproducible(dm, card):
    """Same seed, same numbers; another seed, other numbers; on the device."""
    dm.manual_seed(123)
    a = torch.randn(16, device=card)
    dm.manual_seed(123)
    b = torch.randn(16, device=card)
    dm.manual_seed(124)
    c = torch.randn(16, device=card)
    assert a.device == torch.device(card, 0)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())
    assert dm.initial_seed() == 124


def test_manual_seed_only_current_device(dm):
    """manual_seed seeds the current device only (manual_seed_all seeds all)."""
    dm.manual_seed_all(1)
    with dm.device(1):
        dm.manual_seed(77)
        assert dm.initial_seed() == 77
    assert dm.initial_seed() == 1
    assert dm.default_generators[1].initial_seed() == 77
    assert dm.default_generators[2].initial_seed() == 1


def test_torch_manual_seed_seeds_device(dm, card):
    """torch.manual_seed seeds the device generators too (via manual_seed_all)."""
    torch.manual_seed(7)
    a = torch.randn(8, device=card)
    assert dm.initial_seed() == 7
    assert all(g.initial_seed() == 7 for g in dm.default_generators)
    torch.manual_seed(7)
    b = torch.randn(8, device=card)
    assert torch.equal(a.cpu(), b.cpu())


def test_device_rng_independent_of_cpu_rng(dm, card):
    """Drawing CPU random numbers does not advance the device generator."""
    dm.manual_seed(5)
    a = torch.randn(8, device=card)
    dm.manual_seed(5)
    torch.randn(1000)              # CPU generator only
    b = torch.randn(8, device=card)
    assert torch.equal(a.cpu(), b.cpu())


def test_seed_and_initial_seed(dm):
    """seed() picks a fresh random seed, reported by initial_seed()."""
    dm.manual_seed(11)
    assert dm.initial_seed() == 11
    dm.seed()
    s1 = dm.initial_seed()
    dm.seed()
    s2 = dm.initial_seed()
    assert s1 != 11 and s2 != s1
    dm.seed_all()
    seeds = {g.initial_seed() for g in dm.default_generators}
    assert len(seeds) == 1 and seeds != {s2}


def test_rng_state_round_trip(dm, card):
    """set_rng_state(get_rng_state()) replays the same numbers."""
    dm.manual_seed(3)
    torch.randn(5, device=card)
    state = dm.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    a = torch.randn(10, device=card)
    b = torch.rand(10, device=card)
    dm.set_rng_state(state)
    assert torch.equal(torch.randn(10, device=card).cpu(), a.cpu())
    assert torch.equal(torch.rand(10, device=card).cpu(), b.cpu())
    assert torch.equal(dm.get_rng_state(0), dm.get_rng_state(f"{card}:0"))


def test_rng_state_all_round_trip(dm, card):
    """get_rng_state_all/set_rng_state_all cover every device."""
    dm.manual_seed_all(9)
    states = dm.get_rng_state_all()
    assert len(states) == dm.device_count()
    draws = []
    for i in (0, 3, 7):
        with dm.device(i):
            draws.append(torch.randn(6, device=card).cpu())
    dm.set_rng_state_all(states)
    for i, d in zip((0, 3, 7), draws):
        with dm.device(i):
            assert torch.equal(torch.randn(6, device=card).cpu(), d)


def test_manual_seed_all_seeds_every_device(dm, card):
    """After manual_seed_all every device draws the same stream."""
    dm.manual_seed_all(99)
    assert [g.initial_seed() for g in dm.default_generators] == [99] * dm.device_count()
    draws = []
    for i in range(dm.device_count()):
        with dm.device(i):
            t = torch.randn(4, device=card)
            assert t.get_device() == i
            draws.append(t.cpu())
    assert all(torch.equal(draws[0], d) for d in draws[1:])


def test_default_generators(dm, card):
    """default_generators: one generator per device, on that device."""
    gens = dm.default_generators
    assert len(gens) == dm.device_count() == 8
    for i in range(len(gens)):
        assert isinstance(gens[i], torch.Generator)
        assert gens[i].device == torch.device(card, i)
    assert gens[-1].device == torch.device(card, 7)
    assert len(gens[1:3]) == 2


def test_explicit_generator(card):
    """torch.Generator(device=card) drives torch.randn(generator=...)."""
    g = torch.Generator(device=card)
    assert g.device.type == card
    g.manual_seed(5)
    a = torch.randn(8, device=card, generator=g)
    g.manual_seed(5)
    b = torch.randn(8, device=card, generator=g)
    g.manual_seed(6)
    c = torch.randn(8, device=card, generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())
    assert g.initial_seed() == 6


def test_random_ops_ranges(dm, card):
    """rand/randint/randperm on the device respect their ranges."""
    dm.manual_seed(0)
    u = torch.rand(1000, device=card).cpu()
    assert u.min() >= 0 and u.max() < 1
    r = torch.randint(3, 9, (1000,), device=card).cpu()
    assert r.min() >= 3 and r.max() <= 8
    p = torch.randperm(20, device=card).cpu()
    assert sorted(p.tolist()) == list(range(20))


# ---- lazy init -------------------------------------------------------------------------

def test_lazy_call_init_is_initialized(dm, card):
    """_lazy_call runs the callable; init() is harmless; initialized after use."""
    calls = []
    dm._lazy_call(lambda: calls.append("ran"))
    assert calls == ["ran"]
    dm.init()
    dm._lazy_init()
    torch.empty(1, device=card)
    assert dm.is_initialized() is True


# ---- memory ----------------------------------------------------------------------------

@pytest.mark.parametrize("numel", [1, 128, 129, 1000, 1100])
def test_memory_allocated_rounds_to_granularity(dm, card, numel):
    """memory_allocated grows by the size rounded up to 512 bytes, then drops back."""
    dm.synchronize()
    dm.empty_cache()          # no cached block to reuse: a fresh block of the rounded size
    before = dm.memory_allocated()
    t = torch.empty(numel, device=card)
    expected = -(-numel * 4 // GRANULARITY) * GRANULARITY
    assert dm.memory_allocated() - before == expected
    assert dm.memory_stats()["allocated_bytes.all.current"] - before == expected
    del t
    assert dm.memory_allocated() == before


def test_memory_allocated_small_after_free(dm, card):
    """With a larger block cached, a 1-float tensor still counts 512 bytes."""
    dm.synchronize()
    dm.empty_cache()
    t = torch.empty(1024, device=card)    # 4096 bytes
    del t
    before = dm.memory_allocated()
    u = torch.empty(1, device=card)
    assert dm.memory_allocated() - before == GRANULARITY
    del u


def test_memory_allocated_per_device(dm, card):
    """Each device counts its own allocations."""
    dm.synchronize()
    with dm.device(1):
        dm.empty_cache()
    b0, b1 = dm.memory_allocated(0), dm.memory_allocated(1)
    t = torch.empty(1000, device=f"{card}:1")
    assert dm.memory_allocated(1) - b1 == 4096
    assert dm.memory_allocated(torch.device(card, 1)) - b1 == 4096
    assert dm.memory_allocated(f"{card}:1") - b1 == 4096
    assert dm.memory_allocated(0) == b0
    del t


def test_peak_memory_and_reset(dm, card):
    """max_memory_allocated keeps the peak until reset_peak_memory_stats."""
    dm.synchronize()
    base = dm.memory_allocated()
    dm.reset_peak_memory_stats()
    assert dm.max_memory_allocated() == base
    t = torch.empty(1 << 20, device=card)          # 4 MiB
    assert dm.max_memory_allocated() == base + (4 << 20)
    del t
    assert dm.memory_allocated() == base
    assert dm.max_memory_allocated() == base + (4 << 20)
    assert dm.max_memory_reserved() >= dm.max_memory_allocated()
    dm.reset_peak_memory_stats()
    assert dm.max_memory_allocated() == base


def test_memory_reserved_at_least_allocated(dm, card):
    """The allocator reserves at least what it hands out."""
    t = torch.empty(300_000, device=card)
    assert dm.memory_reserved() >= dm.memory_allocated() > 0
    assert dm.memory_stats()["reserved_bytes.all.current"] == dm.memory_reserved()
    del t


def test_freed_block_is_reused(dm, card):
    """Allocating the same size again after a free does not reserve more."""
    t = torch.empty(2 << 20, device=card)
    del t
    dm.synchronize()
    reserved = dm.memory_reserved()
    t = torch.empty(2 << 20, device=card)
    assert dm.memory_reserved() == reserved
    del t


def test_deprecated_memory_aliases(dm, card):
    """memory_cached & co. warn FutureWarning and return the reserved numbers."""
    t = torch.empty(1 << 18, device=card)
    with pytest.warns(FutureWarning):
        assert dm.memory_cached() == dm.memory_reserved()
    with pytest.warns(FutureWarning):
        assert dm.max_memory_cached() == dm.max_memory_reserved()
    del t
    with pytest.warns(FutureWarning):
        dm.reset_max_memory_allocated()
    assert dm.max_memory_allocated() == dm.memory_allocated()
    with pytest.warns(FutureWarning):
        dm.reset_max_memory_cached()
    assert dm.max_memory_reserved() == dm.memory_reserved()


def test_memory_stats_dict(dm, card):
    """memory_stats is an OrderedDict sorted by key with the torch.cuda keys."""
    t = torch.empty(1000, device=card)
    st = dm.memory_stats()
    assert isinstance(st, collections.OrderedDict)
    assert list(st.keys()) == sorted(st.keys())
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "num_ooms",
                "reserved_bytes.all.peak", "reserved_bytes.all.current", "active_bytes.all.current",
                "allocation.all.current", "segment.all.current", "num_alloc_retries"):
        assert key in st, key
    assert st["allocated_bytes.all.current"] == dm.memory_allocated()
    assert st["reserved_bytes.all.peak"] >= st["reserved_bytes.all.current"]
    assert st["allocation.all.current"] >= 1
    assert st["num_ooms"] >= 0
    del t


def test_reset_accumulated_memory_stats(dm, card):
    """reset_accumulated_memory_stats zeroes the cumulative counters."""
    dm.synchronize()
    dm.empty_cache()
    dm.reset_accumulated_memory_stats()
    assert dm.memory_stats()["allocated_bytes.all.allocated"] == 0
    assert dm.memory_stats()["num_ooms"] == 0
    t = torch.empty(1000, device=card)
    assert dm.memory_stats()["allocated_bytes.all.allocated"] == 4096
    del t
    assert dm.memory_stats()["allocated_bytes.all.freed"] == 4096


def test_empty_cache_releases_reserved(dm, card):
    """After frees, empty_cache returns cached blocks to the device."""
    t = torch.empty(64 << 20, dtype=torch.uint8, device=card)
    del t
    dm.synchronize()
    reserved = dm.memory_reserved()
    free_before = dm.mem_get_info()[0]
    assert reserved >= 64 << 20
    dm.empty_cache()
    assert dm.memory_reserved() <= reserved - (64 << 20)
    assert dm.mem_get_info()[0] >= free_before + (64 << 20)


def test_mem_get_info(dm, card):
    """mem_get_info: free drops by what the allocator reserves; total is fixed."""
    dm.synchronize()
    dm.empty_cache()
    free0, total0 = dm.mem_get_info()
    r0 = dm.memory_reserved()
    assert total0 == EXPECTED[card]["total_memory"]
    assert 0 < free0 <= total0
    t = torch.empty(32 << 20, dtype=torch.uint8, device=card)
    free1, total1 = dm.mem_get_info()
    assert total1 == total0
    assert free1 < free0
    assert free0 - free1 == dm.memory_reserved() - r0
    assert dm.mem_get_info(1)[1] == total0
    del t


def test_out_of_memory(dm, card):
    """Allocating past the capacity raises torch.OutOfMemoryError and counts an OOM."""
    ooms = dm.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError, match=f"{card}:0"):
        torch.empty(1 << 40, device=card)
    assert dm.memory_stats()["num_ooms"] == ooms + 1
    torch.empty(10, device=card)   # still usable


def test_memory_summary(dm, card):
    """memory_summary is a table naming the card and the device."""
    s = dm.memory_summary()
    assert isinstance(s, str)
    assert card in s and "device 0" in s
    assert "Allocated memory" in s
    assert "device 1" in dm.memory_summary(1)


# ---- legacy tensor types ---------------------------------------------------------------

@pytest.mark.parametrize("name,dtype,values", [
    ("FloatTensor", torch.float32, [1.0, 2.0]),
    ("DoubleTensor", torch.float64, [1.0, 2.0]),
    ("HalfTensor", torch.float16, [1.0, 2.0]),
    ("BFloat16Tensor", torch.bfloat16, [1.0, 2.0]),
    ("IntTensor", torch.int32, [1, 2]),
    ("LongTensor", torch.int64, [1, 2]),
    ("ByteTensor", torch.uint8, [1, 2]),
    ("ShortTensor", torch.int16, [1, 2]),
    ("CharTensor", torch.int8, [1, 2]),
    ("BoolTensor", torch.bool, [True, True]),
])
def test_legacy_tensor_types(dm, card, name, dtype, values):
    """dm.<X>Tensor([1, 2]) makes a tensor of that dtype on the current device."""
    cls = getattr(dm, name)
    t = cls([1, 2])
    assert t.dtype == dtype
    assert t.device == torch.device(card, 0)
    assert t.cpu().tolist() == values
    assert isinstance(t, cls)
    assert isinstance(t, dm.FloatTensor) == (dtype == torch.float32)
    assert not isinstance(t.cpu(), cls)


def test_legacy_tensor_sizes_and_device(dm, card):
    """Sizes make an uninitialized tensor; the current device is used."""
    t = dm.FloatTensor(2, 3)
    assert t.shape == (2, 3) and t.dtype == torch.float32 and t.device.type == card
    with dm.device(2):
        assert dm.LongTensor([5]).device == torch.device(card, 2)


def test_tensor_type_strings(card):
    """Tensor.type() names the legacy type; .type('torch.<card>.X') converts."""
    assert torch.ones(2, device=card).type() == f"torch.{card}.FloatTensor"
    assert torch.ones(2, dtype=torch.int64, device=card).type() == f"torch.{card}.LongTensor"
    h = torch.ones(2).type(f"torch.{card}.HalfTensor")
    assert h.device.type == card and h.dtype == torch.float16


# ---- tensors, modules, storage, serialization ------------------------------------------

def test_tensor_repr_names_device(card):
    """Device tensors print with device='<card>:0'."""
    t = torch.tensor([1.0, 2.0], device=card)
    assert f"device='{card}:0'" in repr(t)
    assert f"device='{card}:3'" in repr(t.to(f"{card}:3"))


def test_generated_tensor_and_module_methods(card):
    """torch generates Tensor.<card>(), Module.<card>() and is_<card>."""
    x = torch.arange(4.0)
    y = getattr(x, card)()
    assert y.device == torch.device(card, 0)
    assert getattr(y, f"is_{card}") is True
    assert getattr(x, f"is_{card}") is False
    assert getattr(x, card)(2).device == torch.device(card, 2)
    assert y.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert getattr(y.untyped_storage(), f"is_{card}") is True
    m = torch.nn.Linear(3, 2)
    assert getattr(m, card)() is m
    assert m.weight.device.type == card and m.bias.device.type == card
    out = m(torch.ones(1, 3, device=card))
    assert out.device.type == card and out.shape == (1, 2)


def test_cross_device_copy(card):
    """Copies between devices of the card keep the values."""
    a = torch.arange(6.0, device=f"{card}:0")
    b = a.to(f"{card}:5")
    assert b.device == torch.device(card, 5)
    assert b.cpu().tolist() == list(range(6))


def test_save_load_round_trip(card):
    """torch.save/torch.load keep device and values; map_location moves them."""
    a = torch.arange(5.0, device=card)
    b = torch.tensor([7, 8], device=f"{card}:1")
    buf = io.BytesIO()
    torch.save({"a": a, "b": b}, buf)
    buf.seek(0)
    d = torch.load(buf)
    assert d["a"].device == torch.device(card, 0)
    assert d["b"].device == torch.device(card, 1)
    assert d["a"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert d["b"].cpu().tolist() == [7, 8]
    buf.seek(0)
    c = torch.load(buf, map_location="cpu")
    assert c["a"].device.type == "cpu" and c["b"].device.type == "cpu"
    assert c["a"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    buf.seek(0)
    e = torch.load(buf, map_location=f"{card}:3")
    assert e["b"].device == torch.device(card, 3)


def test_pinned_memory(dm, card):
    """Pinned host tensors exist and copy to the device non-blocking."""
    p = torch.empty(10, pin_memory=True)
    assert p.is_pinned()
    assert not torch.arange(3.0).is_pinned()
    src = torch.arange(10.0).pin_memory()
    assert src.is_pinned()
    dst = src.to(card, non_blocking=True)
    dm.current_stream().synchronize()
    assert dst.device.type == card
    assert dst.cpu().tolist() == list(range(10))
    dst2 = torch.zeros(10, device=card)
    dst2.copy_(src * 2, non_blocking=True)
    back = torch.empty(10).pin_memory()
    back.copy_(dst2, non_blocking=True)
    dm.synchronize()
    assert back.tolist() == [2.0 * i for i in range(10)]


# ---- graphs ----------------------------------------------------------------------------

def test_graph_class_per_card(dm, card):
    """MLU has MLUGraph, SUPA has SUPAGraph (and not the other)."""
    assert graph_class(dm, card).__name__ == EXPECTED[card]["graph"]
    other = "SUPAGraph" if card == "mlu" else "MLUGraph"
    assert not hasattr(dm, other)


def test_graph_capture_replay(dm, card):
    """Captured elementwise work replays on the new contents of the static input."""
    G = graph_class(dm, card)
    x = torch.arange(-3.0, 5.0, device=card)
    g = G()
    assert dm.is_current_stream_capturing() is False
    with dm.graph(g):
        assert dm.is_current_stream_capturing() is True
        assert dm.current_stream() != dm.default_stream()
        y = x * 2 + 1
        z = y.relu()
    assert dm.is_current_stream_capturing() is False
    assert g.node_count() > 0

    new = torch.tensor([1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0])
    x.copy_(new.to(card))
    g.replay()
    dm.synchronize()
    assert torch.equal(z.cpu(), (new * 2 + 1).relu())

    x.copy_((new * 3).to(card))
    g.replay()
    g.replay()
    dm.synchronize()
    assert torch.equal(z.cpu(), (new * 6 + 1).relu())
    assert torch.equal(y.cpu(), new * 6 + 1)

    g.reset()
    assert g.node_count() == 0
    with pytest.raises(RuntimeError):
        g.replay()


def test_graph_replay_repeats_inplace_work(dm, card):
    """Each replay re-runs an in-place accumulation once."""
    G = graph_class(dm, card)
    x = torch.tensor([1.0, 2.0, 3.0], device=card)
    acc = torch.zeros(3, device=card)
    g = G()
    with dm.graph(g):
        acc.add_(x)
    dm.synchronize()
    after_capture = acc.cpu()
    g.replay()
    g.replay()
    dm.synchronize()
    assert torch.equal(acc.cpu() - after_capture, torch.tensor([2.0, 4.0, 6.0]))


def test_graph_capture_does_not_execute(dm, card):
    """Work inside a capture runs only at replay, as with CUDA graphs."""
    G = graph_class(dm, card)
    x = torch.ones(4, device=card)
    acc = torch.zeros(4, device=card)
    g = G()
    with dm.graph(g):
        acc.add_(x)
        acc.addcmul_(x, x)
    dm.synchronize()
    assert acc.cpu().tolist() == [0.0] * 4
    g.replay()
    dm.synchronize()
    assert acc.cpu().tolist() == [2.0] * 4


def test_graph_capture_matmul_2d(dm, card):
    """A captured 2-D matmul replays with the new inputs."""
    G = graph_class(dm, card)
    a = torch.zeros(4, 4, device=card)
    b = torch.eye(4, device=card)
    g = G()
    with dm.graph(g):
        c = a @ b
    na = torch.arange(16.0).view(4, 4)
    a.copy_(na.to(card))
    g.replay()
    dm.synchronize()
    assert torch.equal(c.cpu(), na)


def test_graph_capture_vector_matrix(dm, card):
    """torch.matmul(vector, matrix) (and F.linear on a 1-D input) replays."""
    G = graph_class(dm, card)
    v = torch.zeros(4, device=card)
    m = torch.eye(4, device=card)
    g = G()
    with dm.graph(g):
        out = v @ m
    v.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]).to(card))
    g.replay()
    dm.synchronize()
    assert out.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_graph_capture_inplace_metadata_op(dm, card):
    """x.view(2, 2).exp().t_() replays to the transposed result."""
    G = graph_class(dm, card)
    x = torch.zeros(4, device=card)
    g = G()
    with dm.graph(g):
        out = x.view(2, 2).exp().t_()
    x.copy_(torch.arange(4.0).to(card))
    g.replay()
    dm.synchronize()
    assert torch.allclose(out.cpu(), torch.arange(4.0).view(2, 2).exp().t())


def test_graph_replay_is_cheaper_than_eager(dm, card):
    """Replay of 50 small kernels costs less simulated host and device time than eager."""
    G = graph_class(dm, card)
    a = torch.ones(64, device=card)
    g = G()
    with dm.graph(g):
        b = a
        for _ in range(50):
            b = b + 1
    dm.synchronize()
    h0 = dm.host_time_ns()
    g.replay()
    dm.synchronize()
    h1 = dm.host_time_ns()
    c = a
    for _ in range(50):
        c = c + 1
    dm.synchronize()
    h2 = dm.host_time_ns()
    assert torch.equal(b.cpu(), c.cpu())
    assert b.cpu()[0].item() == 51.0
    assert 0 < h1 - h0 < h2 - h1


def test_graph_capture_rejects_synchronize(dm, card):
    """Synchronizing inside a capture is illegal and raises RuntimeError."""
    G = graph_class(dm, card)
    g = G()
    with pytest.raises(RuntimeError):
        with dm.graph(g):
            dm.synchronize()


def test_graph_failed_capture_restores_stream(dm, card):
    """After a failed capture, the stream and capture state are restored."""
    G = graph_class(dm, card)
    x = torch.ones(2, device=card)
    with pytest.raises(Exception):
        with dm.graph(G()):
            x.sum().item()
    assert dm.is_current_stream_capturing() is False
    assert dm.current_stream() == dm.default_stream()
    assert (x + 1).cpu().tolist() == [2.0, 2.0]


def test_graph_pool_handle(dm, card):
    """graph_pool_handle gives distinct handles; a graph reports its pool."""
    h1, h2 = dm.graph_pool_handle(), dm.graph_pool_handle()
    assert h1 != h2
    G = graph_class(dm, card)
    x = torch.ones(2, device=card)
    g = G()
    with dm.graph(g, pool=h1):
        x.mul(3)
    assert g.pool() == h1


# ---- profiler ranges (MLU only) --------------------------------------------------------

def test_cnpx_ranges(dm, card):
    """MLU: cnpx.range_push returns the depth, range_pop the ended depth; SUPA has no cnpx."""
    if card != "mlu":
        assert not hasattr(dm, "cnpx")
        return
    cnpx = dm.cnpx
    assert cnpx.range_push("outer") == 0
    assert cnpx.range_push("inner") == 1
    assert cnpx.mark("here") is None
    assert cnpx.range_pop() == 1
    assert cnpx.range_pop() == 0
    assert cnpx.range_pop() == -1
    with cnpx.range("step {}", 3):
        assert cnpx.range_push("nested") == 1
        cnpx.range_pop()
    assert cnpx.range_push("again") == 0
    cnpx.range_pop()


# ---- autocast --------------------------------------------------------------------------

def test_autocast_bfloat16(dm, card):
    """torch.autocast(card, bfloat16) runs matmul in bf16; elementwise stays fp32."""
    a = torch.randn(8, 8, device=card)
    with torch.autocast(device_type=card, dtype=torch.bfloat16):
        assert torch.is_autocast_enabled(card)
        assert (a @ a).dtype == torch.bfloat16
        assert torch.nn.functional.linear(a, a).dtype == torch.bfloat16
        assert (a + a).dtype == torch.float32
    assert (a @ a).dtype == torch.float32
    assert not torch.is_autocast_enabled(card)


def test_dm_amp_autocast(dm, card):
    """dm.amp.autocast is torch.autocast for the card; default dtype float16."""
    a = torch.randn(8, 8, device=card)
    with dm.amp.autocast(dtype=torch.float16):
        assert dm.is_autocast_enabled() is True
        assert dm.get_autocast_dtype() == torch.float16
        assert torch.mm(a, a).dtype == torch.float16
    with dm.amp.autocast(dtype=torch.bfloat16):
        assert dm.get_autocast_dtype() == torch.bfloat16
        assert (a @ a).dtype == torch.bfloat16
    with dm.amp.autocast():
        assert (a @ a).dtype == torch.float16
    assert dm.is_autocast_enabled() is False
    with dm.amp.autocast(enabled=False):
        assert (a @ a).dtype == torch.float32


def test_grad_scaler(dm, card):
    """dm.amp.GradScaler scales a loss on the card by the initial scale."""
    scaler = dm.amp.GradScaler(init_scale=1024.0)
    loss = torch.tensor(2.0, device=card)
    scaled = scaler.scale(loss)
    assert scaled.device.type == card
    assert scaled.item() == 2048.0


# ---- __all__ -------------------------------------------------------------------------

def test_public_names(dm, card):
    """__all__ lists the torch.cuda-like names and the card's extras."""
    names = set(dm.__all__)
    for n in ("is_available", "device_count", "current_device", "set_device", "device",
              "device_of", "synchronize", "get_device_properties", "Stream", "Event",
              "current_stream", "default_stream", "set_stream", "stream", "StreamContext",
              "memory_stats", "memory_allocated", "empty_cache", "mem_get_info", "manual_seed",
              "manual_seed_all", "get_rng_state", "set_rng_state", "default_generators", "graph",
              "amp", "FloatTensor", EXPECTED[card]["graph"]):
        assert n in names, n
        assert hasattr(dm, n)
    assert ("cnpx" in names) == (card == "mlu")


def test_host_register_makes_host_memory_pinned(dm, card):
    """SUPA's runtime handle registers caller-owned host memory as pinned (DeepSpeed's
    DS_PIN_MEMORY_BACKEND=native path); overlapping registrations fail with a status code."""
    if card != "supa":
        pytest.skip("supart() is the SUPA runtime's handle")
    buf = torch.zeros(4096, dtype=torch.uint8)
    assert not buf.is_pinned()
    rt = dm.supart()
    assert rt.supaHostRegister(buf.data_ptr(), buf.numel(), 0) == 0
    try:
        assert buf.is_pinned()
        status = rt.supaHostRegister(buf.data_ptr() + 16, 16, 0)
        assert status != 0
        with pytest.raises(RuntimeError, match="runtime error"):
            dm.check_error(status)
    finally:
        assert rt.supaHostUnregister(buf.data_ptr()) == 0
    assert not buf.is_pinned()
    assert rt.supaHostUnregister(buf.data_ptr()) != 0
    dm.check_error(0)


def test_torch_accelerator_graph_records_and_replays(dm, card):
    """torch.accelerator.Graph works on the card: capture records x.add_(1) without running
    it; each replay runs it once."""
    x = torch.zeros(4, device=card)
    g = torch.accelerator.Graph()
    side = dm.Stream()
    side.wait_stream(dm.current_stream())   # x was made on the default stream
    with dm.stream(side):
        g.capture_begin()
        x.add_(1)
        g.capture_end()
        assert torch.equal(x.cpu(), torch.zeros(4))
        g.replay()
        g.replay()
    dm.synchronize()
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


def test_graph_keeps_memory_of_freed_intermediates(dm, card):
    """Blocks of tensors freed after capture are not handed to new allocations on the
    capture stream while the graph may still write them (as a graph's private pool)."""
    s = dm.Stream()
    x = torch.ones(4096, device=card)
    g = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")()
    with dm.graph(g, stream=s):
        y = x * 2           # unboxed kernels only: nothing else holds y
        z = y + 1
        u = z.exp()         # boxed (host-executed) kernels
        w = u.log()
    del y, u
    with dm.stream(s):
        others = [torch.full((4096,), 7.0, device=card) for _ in range(6)]
    g.replay()
    dm.synchronize()
    for o in others:
        assert torch.equal(o.cpu(), torch.full((4096,), 7.0))
    assert torch.allclose(z.cpu(), torch.full((4096,), 3.0))
    assert torch.allclose(w.cpu(), torch.full((4096,), 3.0))
