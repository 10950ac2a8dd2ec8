"""For the worker scripts of the multi-rank tests (test_collectives, test_collective_dtypes):
one process per rank (torch.multiprocessing spawn), each running its cases and handing its
results to the parent, which prints them as one line, `RESULT {rank: {case: "ok" | error}}`."""
import json
import traceback


def run_cases(cases: dict, res: dict, barrier) -> None:
    """Runs each case (name -> function) in order, noting "ok" or its error in `res`; the
    ranks meet at `barrier()` after each, so a case that failed on one rank does not leave
    the others inside it."""
    for name, fn in cases.items():
        try:
            fn()
            res[name] = "ok"
        except BaseException as e:
            res[name] = f"{type(e).__name__}: {e}\n" + traceback.format_exc()[-1500:]
        barrier()


def spawn_world(worker, world: int) -> None:
    """Runs worker(rank, world, queue) in a process per rank; each puts (rank, results)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, world, q), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    results = dict(q.get() for _ in range(world))
    for p in procs:
        p.join(60)
    print("RESULT " + json.dumps(results))
