"""torch.compile with its default backend (Inductor) on the emulated card: Inductor's C++
kernels run on the device's (host-addressable) memory, each one device kernel on the
current stream, timed as elementwise work over its operands; library calls (matmuls) run as
the card's own operators."""
import os

import pytest
import torch

N = 1 << 20

# The async checker's dispatch mode, active for its whole process, is one torch.compile does
# not trace through: compiled functions run eagerly there.
pytestmark = pytest.mark.skipif(bool(os.environ.get("CARDSIM_CHECK")),
                                reason="torch.compile runs eagerly under the checker's dispatch mode")


def test_a_compiled_module_trains_as_the_eager_one(card):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4)).to(card)
    x = torch.randn(8, 16, device=card)
    ref = model(x)
    ref.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    out = torch.compile(model)(x)
    out.square().sum().backward()
    assert out.device.type == card
    torch.testing.assert_close(out.cpu(), ref.cpu(), rtol=1e-5, atol=1e-5)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad.cpu(), g.cpu(), rtol=1e-5, atol=1e-5)


def test_a_fused_kernel_is_one_device_kernel_timed_by_its_traffic(card, launched):
    def f(x, y):
        return torch.nn.functional.silu(x) * y + 1

    compiled = torch.compile(f)
    x, y = torch.randn(N, device=card), torch.randn(N, device=card)
    out = compiled(x, y)   # compiles
    torch.testing.assert_close(out.cpu(), f(x.cpu(), y.cpu()), rtol=1e-6, atol=1e-6)

    fused = launched(lambda: compiled(x, y))
    assert len(fused) == 1 and fused[0][0].startswith("cpp_fused_"), fused
    name, duration, flops, nbytes = fused[0]
    assert nbytes == 3 * 4 * N and flops == N   # reads x and y, writes the result
    # Eager, the same function is three kernels; one add has the fused kernel's traffic
    # and work, so it takes the same time.
    eager = launched(lambda: f(x, y))
    assert len(eager) == 3, eager
    add = launched(lambda: torch.add(x, y))
    assert add[0][2:] == (N, 3 * 4 * N) and add[0][1] == duration, (add, fused)
    assert sum(k[1] for k in eager) > 2 * duration


def test_a_captured_compiled_kernel_runs_again_at_each_replay(card, dm):
    def f(x):
        return torch.sigmoid(x) * 2 - x

    compiled = torch.compile(f)
    x = torch.randn(4096, device=card)
    compiled(x)   # compiled outside the capture
    g = getattr(dm, f"{card.upper()}Graph")()
    s = dm.Stream()
    s.wait_stream(dm.current_stream())
    with dm.stream(s):
        compiled(x)
    dm.current_stream().wait_stream(s)
    with dm.graph(g):
        out = compiled(x)
    for _ in range(2):
        x.copy_(torch.randn(4096))
        g.replay()
        dm.synchronize()
        torch.testing.assert_close(out.cpu(), f(x.cpu()), rtol=1e-6, atol=1e-6)


def test_cpp_wrapper_is_refused_by_name(card):
    import torch._inductor.config as inductor_config
    x = torch.randn(64, device=card)
    with inductor_config.patch(cpp_wrapper=True):
        with pytest.raises(Exception, match="cpp_wrapper is not supported on the emulated"):
            torch.compile(lambda t: torch.sigmoid(t) * 3)(x)


def test_half_precision_reductions_compile_as_on_the_cpu(card):
    # fp16 sums inside fused backward kernels (DeepSpeed's SimpleModel in fp16): Inductor's
    # C++ backend must take the device for its own (its dtype propagation is not Triton's)
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(10, 10)
            self.loss = torch.nn.CrossEntropyLoss()

        def forward(self, x, y):
            return self.loss(self.linear(x), y)

    torch.manual_seed(0)
    model = Model().to(card).half()
    x = torch.randn(1, 10, device=card, dtype=torch.float16)
    y = torch.randn(1, 10, device=card, dtype=torch.float16)
    ref = model(x, y)
    ref.backward()
    grad = model.linear.weight.grad.clone()
    model.zero_grad()
    loss = torch.compile(model)(x, y)
    loss.backward()
    torch.testing.assert_close(loss.float().cpu(), ref.float().cpu(), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(model.linear.weight.grad.float().cpu(), grad.float().cpu(), rtol=2e-3, atol=2e-3)


_CACHED_COMPILE = r'''
import json, sys, torch, torch_{card}
import torch.compiler.config as cconfig
from torch._dynamo.utils import counters

def f(x):
    return torch.sigmoid(x) * 3 + 1

x = torch.arange(64, dtype=torch.float32, device="{card}")
seen = []
for tag in sys.argv[1:]:
    if tag != "-":
        cconfig.cache_key_tag = tag   # as another build of cardsim's code generator would set it
    torch._dynamo.reset()
    counters.clear()
    out = torch.compile(f)(x)
    assert torch.equal(out.cpu(), f(x.cpu())), "compiled result differs"
    seen.append([cconfig.cache_key_tag, counters["inductor"]["fxgraph_cache_hit"],
                 counters["inductor"]["fxgraph_cache_miss"]])
print(json.dumps(seen))
'''


def test_compile_caches_are_keyed_by_the_code_generator(card, tmp_path):
    """Inductor's on-disk caches key on torch's sources only: cardsim's code generator names
    itself in every key (torch.compiler.config.cache_key_tag), so generated code cached by
    another version of it is not loaded, while the same version hits its own cache. A tag
    the user set comes first."""
    import hashlib
    import json
    import subprocess
    import sys

    import cardsim_torch.inductor as ind
    with open(ind.__file__, "rb") as fh:
        ours = "cardsim-inductor-" + hashlib.sha256(fh.read()).hexdigest()[:16]
    assert ind.codegen_tag() == ours
    assert torch.compiler.config.cache_key_tag.split("|")[-1] == ours

    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), TORCHINDUCTOR_FX_GRAPH_CACHE="1",
               TORCH_COMPILE_CACHE_KEY_TAG="user-tag")
    code = _CACHED_COMPILE.replace("{card}", card)

    def run(*tags):
        r = subprocess.run([sys.executable, "-c", code, *tags], capture_output=True, text=True, env=env,
                           timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    first = run("-")
    assert first == [[f"user-tag|{ours}", 0, 1]]
    # the same code generator: cached; another one: compiled again
    again, other = run("-", "user-tag|cardsim-inductor-0000000000000000")
    assert again == [f"user-tag|{ours}", 1, 0]
    assert other == ["user-tag|cardsim-inductor-0000000000000000", 0, 1]
