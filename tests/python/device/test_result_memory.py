"""Large results made in the device block their allocation takes (kernels/ResultMemory.h):
the CPU kernel is lent the cached block the device allocator would choose, so the result is
usually in place; a wrong guess (a temporary of the same size taking the block first, another
stream, a view at an offset) must still give the CPU's values, and the allocator must see
exactly the requests it saw before (statistics count results only, never a kernel's
temporaries)."""
import pytest
import torch

N = 1 << 16   # 256 KiB of fp32: above the lending threshold (64 KiB)

OPS = {
    "relu": lambda x: torch.relu(x),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, 0),
    "exp": lambda x: torch.exp(x),
    "cumsum": lambda x: torch.cumsum(x, 1),
    "sum_dim": lambda x: x.sum(0),
    "cat": lambda x: torch.cat([x, x], 0),
    "where": lambda x: torch.where(x > 0, x, x * 0.5),
    "pow": lambda x: x.pow(3),
    "flip": lambda x: x.flip(0),
    "transpose_contiguous": lambda x: x.t().contiguous(),
    "index_select": lambda x: x.index_select(0, torch.arange(x.shape[0] - 1, -1, -1, device=x.device)),
    "sort_values": lambda x: torch.sort(x, 1).values,
    "layer_norm": lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
    "gelu": lambda x: torch.nn.functional.gelu(x),
}


def _warm_cache(card, shapes):
    """Frees blocks of the sizes the ops ask for, so that their results are lent cached blocks."""
    held = [torch.empty(s, device=card) for s in shapes for _ in range(3)]
    del held


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_large_result_equals_the_cpu_result_with_same_size_blocks_cached(card, dm, name):
    torch.manual_seed(0)
    x = torch.randn(256, N // 256)
    want = OPS[name](x)
    xd = x.to(card)
    _warm_cache(card, [x.shape, (512, N // 256), (N // 256,)])
    for _ in range(3):   # the later rounds take blocks the earlier results left in the cache
        got = OPS[name](xd)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        assert got.device.type == card
        assert got.stride() == want.stride()


def test_a_result_on_a_side_stream_is_right(card, dm):
    x = torch.randn(256, 256)
    xd = x.to(card)
    _warm_cache(card, [x.shape])
    s = dm.Stream()
    s.wait_stream(dm.current_stream())
    with dm.stream(s):
        y = torch.relu(xd)
        z = torch.exp(y)
    s.synchronize()
    torch.testing.assert_close(z.cpu(), torch.exp(torch.relu(x)))


def test_the_allocator_counts_results_only(card, dm):
    x = torch.randn(256, N // 256, device=card)
    for _ in range(2):   # warm: the sizes are cached
        y = torch.softmax(x, -1)
        del y
    dm.synchronize()
    before = dm.memory_stats()
    ys = [torch.softmax(x, -1) for _ in range(4)]
    after = dm.memory_stats()
    # Four results of N fp32 elements: four allocations of exactly their bytes, no temporary.
    assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 4
    assert after["allocated_bytes.all.allocated"] - before["allocated_bytes.all.allocated"] == 4 * N * 4
    assert after["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] == 4 * N * 4
    del ys


def test_results_share_no_memory_while_alive(card, dm):
    x = torch.randn(256, N // 256, device=card)
    _warm_cache(card, [x.shape])
    outs = [torch.relu(x + i) for i in range(4)]
    ptrs = {o.data_ptr() for o in outs}
    assert len(ptrs) == 4
    for i, o in enumerate(outs):
        torch.testing.assert_close(o.cpu(), torch.relu(x.cpu() + i))
