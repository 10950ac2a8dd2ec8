"""``torch.<device>.make_graphed_callables``: graphed forward and backward of callables, as
torch.cuda.make_graphed_callables, over the device module's streams and graphs."""
from __future__ import annotations

import torch


def make_graphed_callables(dm, callables, sample_args, num_warmup_iters: int = 3,
                           allow_unused_input: bool = False, pool=None):
    """Graphs the forward and the backward of callables (functions or modules), as
    torch.cuda.make_graphed_callables does: each is warmed up on a side stream, its
    forward captured, then its backward (in reverse order of the callables); calls then
    copy their inputs into the captured ones and replay, and the autograd backward
    replays the backward graph. A module runs its graph while its training mode is the
    one it was captured in, its own forward otherwise. Inputs must be tensors."""
    from torch.utils._pytree import tree_flatten, tree_unflatten
    if torch.is_autocast_enabled() and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast caching; "
                           "use torch.autocast(..., cache_enabled=False)")
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError(f"make_graphed_callables: {len(callables)} callable(s) but "
                         f"{len(sample_args)} tuple(s) of sample arguments")
    flat_args = []
    for c, args in zip(callables, sample_args):
        if isinstance(c, torch.nn.Module):
            if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
                raise RuntimeError("make_graphed_callables: modules must not have hooks registered "
                                   "when they are graphed")
            if any(b.requires_grad for b in c.buffers()):
                raise RuntimeError("make_graphed_callables: module buffers must not require grad")
        flat, _ = tree_flatten(args)
        if not all(isinstance(a, torch.Tensor) for a in flat):
            raise TypeError("make_graphed_callables: sample_args must contain only tensors")
        flat_args.append(tuple(flat))
    params = [tuple(c.parameters()) if isinstance(c, torch.nn.Module) else () for c in callables]
    surfaces = [a + p for a, p in zip(flat_args, params)]
    fwd_graphs = [dm.Graph() for _ in callables]
    bwd_graphs = [dm.Graph() for _ in callables]
    mempool = dm.graph_pool_handle() if pool is None else pool

    def grads_of(outputs, surface, grad_outputs):
        outs = tuple(o for o in outputs if o.requires_grad)
        ins = tuple(i for i in surface if i.requires_grad)
        if not outs or not ins:
            return ()
        return torch.autograd.grad(outputs=outs, inputs=ins, grad_outputs=grad_outputs, only_inputs=True,
                                   allow_unused=allow_unused_input)

    dm.synchronize()
    side = dm.Stream()
    side.wait_stream(dm.current_stream())
    with dm.StreamContext(side):
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                outs = tree_flatten(func(*args))[0]
                grads_of(outs, surface, tuple(torch.empty_like(o) for o in outs if o.requires_grad))
                del outs
    dm.current_stream().wait_stream(side)
    dm.synchronize()

    static_outputs, specs = [], []
    for func, args, g in zip(callables, sample_args, fwd_graphs):
        with dm.graph(g, pool=mempool):
            outs = func(*args)
        flat, spec = tree_flatten(outs)
        static_outputs.append(tuple(flat))
        specs.append(spec)
    static_grad_outputs, static_grad_inputs = [None] * len(callables), [None] * len(callables)
    for i in reversed(range(len(callables))):
        grad_outs = tuple(torch.empty_like(o) if o.requires_grad else None for o in static_outputs[i])
        with dm.graph(bwd_graphs[i], pool=mempool):
            got = grads_of(static_outputs[i], surfaces[i], tuple(o for o in grad_outs if o is not None))
        it = iter(got)
        static_grad_inputs[i] = tuple(next(it) if a.requires_grad else None for a in surfaces[i])
        static_grad_outputs[i] = grad_outs

    def graphed_function(i):
        fwd, bwd, n_user = fwd_graphs[i], bwd_graphs[i], len(flat_args[i])
        surface, outputs = surfaces[i], static_outputs[i]
        grad_outs, grad_ins = static_grad_outputs[i], static_grad_inputs[i]

        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                for k in range(n_user):
                    if surface[k].data_ptr() != inputs[k].data_ptr():
                        surface[k].copy_(inputs[k])
                fwd.replay()
                return tuple(o.detach() for o in outputs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx, *grads):
                for mine, given in zip(grad_outs, grads):
                    if mine is not None and given is not None and mine.data_ptr() != given.data_ptr():
                        mine.copy_(given)
                bwd.replay()
                return tuple(b.detach() if b is not None else None for b in grad_ins)

        def functionalized(*user_args):
            flat = tree_flatten(user_args)[0]
            return tree_unflatten(Graphed.apply(*(tuple(flat) + params[i])), specs[i])
        return functionalized

    out = []
    for i, func in enumerate(callables):
        graphed = graphed_function(i)
        if isinstance(func, torch.nn.Module):
            def forward(*user_args, _m=func, _state=func.training, _graphed=graphed, _orig=func.forward):
                return _graphed(*user_args) if _m.training == _state else _orig(*user_args)
            func.forward = forward
            out.append(func)
        else:
            out.append(graphed)
    return out[0] if just_one else tuple(out)


def _amount(v: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if v >= scale:
            return f"{v / scale:.2f} {prefix}{unit}"
    return f"{v:.0f} {unit}"


def write_dot(title: str, nodes: list, path) -> None:
    """A captured graph (Graph.describe()) as Graphviz DOT: its work nodes, each after the one
    before it on the same stream, and after the work an event recorded inside the capture
    followed on another stream (the fork/join edges a replay keeps)."""
    work = [n for n in nodes if n["kind"] not in ("event record", "event wait")]
    lines = [f"digraph {title} {{", f'  label="{title}: {len(work)} node(s)";',
             "  node [shape=box, fontname=monospace];"]
    edges: list[tuple[int, int]] = []
    last: dict = {}          # stream -> its latest work node
    waits: dict = {}         # stream -> nodes it waits for before its next work node
    at_record: dict = {}     # event -> the recording stream's latest work node then
    i = 0
    for n in nodes:
        if n["kind"] == "event record":
            if n["stream"] in last:
                at_record[n["event"]] = last[n["stream"]]
            continue
        if n["kind"] == "event wait":
            if n["event"] in at_record:
                waits.setdefault(n["stream"], []).append(at_record[n["event"]])
            continue
        cost = []
        if n["flops"]:
            cost.append(_amount(n["flops"], "FLOP"))
        if n["bytes"]:
            cost.append(_amount(n["bytes"], "B"))
        name = n["name"].replace('"', r"\"")
        label = f"{i}: {name}\\n{n['kind']}, stream {n['stream']}" + (f"\\n{', '.join(cost)}" if cost else "")
        lines.append(f'  n{i} [label="{label}"];')
        before = [last[n["stream"]]] if n["stream"] in last else []
        before += [w for w in waits.pop(n["stream"], []) if w not in before]
        edges += [(b, i) for b in before]
        last[n["stream"]] = i
        i += 1
    lines += [f"  n{a} -> n{b};" for a, b in edges]
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
