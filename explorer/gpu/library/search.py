"""Algorithm choice for cuSPARSELt plans: time every config id, keep only correct ones.

Some cuSPARSELt configs return wrong results or even stop the CUDA context (an illegal
instruction was seen on Hopper with cuSPARSELt 0.8), so by default the configs are tried in a
child process (``python -m explorer.gpu.library.search``): a config that kills the child is recorded
as crashed and the search resumes after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch

from explorer.dtypes import dtype_name
from explorer.gpu.library.child_process import SEARCH_BUDGET_S, child_lines
from explorer.gpu.library.cusparselt import (
    CUSPARSELT_DTYPES,
    CompressedTensor,
    CusparseltRefused,
    Plan,
    PlanKey,
    compress,
    padded_tokens,
)
from explorer.gpu.routes.timing import eager_ms

__all__ = ["config_order", "search_algorithm", "search_in_process"]


def search_algorithm(
    cw: CompressedTensor,
    weight: torch.Tensor,
    tokens: int,
    epilogue: str = "none",
    method: str = "time",
    out_dtype: torch.dtype | None = None,
    rtol: float = 2e-2,
    iters: int = 20,
    isolate: bool = True,
    timeout: float = 600.0,
    layout: str = "cc",
    budget_s: float = SEARCH_BUDGET_S,
) -> dict:
    """Choose an algorithm config id, keeping only configs whose output matches dense.

    Some cuSPARSELt configs return wrong results or even stop the CUDA context (an illegal
    instruction was seen on Hopper with cuSPARSELt 0.8), so by default the configs are tried
    in a child process: a config that kills the child is recorded as crashed and the search
    resumes after it.

    Parameters
    ----------
    cw, weight : CompressedTensor, torch.Tensor
        The compressed weight and its dense masked original (the reference).
    tokens : int
        Token count to tune for.
    epilogue : {"none", "relu", "gelu"}
        The epilogue fused into the plans (applied to the reference too).
    method : {"time", "search"}
        ``"time"`` times every config id with CUDA events; ``"search"`` asks
        ``matmul_search`` and checks its choice (falling back to ``"time"``).
    out_dtype : torch.dtype, optional
        Dtype of the product (default: the first cuSPARSELt allows for the weight's dtype).
    rtol : float
        Largest relative error (Frobenius norm) of a correct product.
    iters : int
        Timed iterations per config.
    isolate : bool
        Try the configs in a child process (default) rather than in this one.
    timeout : float
        Seconds to wait for the child to exit once its output has ended.
    layout : {"cc", "rr", "rc", "cr"}
        Operand layouts of the plans tried (see :mod:`explorer.gpu.library.cusparselt`).
    budget_s : float
        Seconds the isolated search may spend trying configs once its child has started;
        when spent, the best config tried so far is kept (``"complete": False``).

    Returns
    -------
    dict
        ``{"alg": id, "ms": time, "tried": [(id, ms or None, status)], "method": method,
        "complete": bool}``; status is ``"ok"``, ``"wrong"``, ``"refused"`` or ``"crashed"`` (a config
        that killed the child or left it silent for ``CHILD_SILENCE_S``).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(256, 512, dtype=torch.half, device="cuda")  # doctest: +GPU
    >>> w = w.masked_fill(~make_mask(w, "2:4"), 0)
    >>> found = search_algorithm(compress(w), w, tokens=1024)
    >>> found["alg"] in [alg for alg, ms, status in found["tried"] if status == "ok"]
    True
    """
    out_dtype = out_dtype or CUSPARSELT_DTYPES[cw.dtype][0]
    if not isolate:
        tried: list = []
        search_in_process(
            weight, cw, tokens, epilogue, method, out_dtype, rtol, iters, 0, tried.append, layout
        )
        return _pick(tried, method, cw.shape)
    return _search_isolated(
        weight, tokens, epilogue, method, out_dtype, rtol, iters, timeout, layout, budget_s
    )


def _pick(tried: list, method: str, shape, complete: bool = True) -> dict:
    good = [(ms, alg) for alg, ms, st in tried if st == "ok" and ms is not None]
    if not good:
        raise RuntimeError(
            f"no cuSPARSELt algorithm produced the dense reference for weight {shape}; "
            "keep this layer dense."
        )
    ms, alg = min(good)
    return {"alg": alg, "ms": ms, "tried": tried, "method": method, "complete": complete}


def _search_isolated(
    weight,
    tokens,
    epilogue,
    method,
    out_dtype,
    rtol,
    iters,
    timeout,
    layout="cc",
    budget_s=SEARCH_BUDGET_S,
) -> dict:
    import json
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    tried: list = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.pt"
        torch.save(weight.detach().cpu(), path)
        start, max_id = 0, None
        deadline = {"at": float("inf")}  # set when the first child starts trying configs
        complete = True
        while max_id is None or start < max_id:
            args = [
                sys.executable,
                "-m",
                "explorer.gpu.library.search",
                str(path),
                str(tokens),
                epilogue,
                method,
                dtype_name(out_dtype),
                str(rtol),
                str(iters),
                str(start),
                layout,
            ]
            errors = Path(tmp) / f"stderr-{start}.txt"
            with errors.open("w") as err:
                proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)
                last_try = None
                # a child silent inside a config, or past the budget, is ended
                for line in child_lines(proc, deadline=lambda: deadline["at"]):
                    if not line.startswith("{"):
                        continue
                    rec = json.loads(line)
                    if "max" in rec:
                        max_id = rec["max"]
                        if deadline["at"] == float("inf"):
                            deadline["at"] = time.monotonic() + budget_s
                    elif "try" in rec:
                        last_try = rec["try"]
                    elif "alg" in rec:
                        tried.append((rec["alg"], rec["ms"], rec["status"]))
                        last_try = None
                proc.wait(timeout=timeout)
            stderr = errors.read_text(errors="replace")
            if proc.returncode == 0:
                break
            if time.monotonic() >= deadline["at"]:
                complete = False  # the budget is spent: keep the best config tried so far
                break
            if last_try is None:
                raise RuntimeError(
                    f"the algorithm search failed before trying a config:\n{stderr[-800:]}"
                )
            tried.append((last_try, None, "crashed"))
            start = last_try + 1
            method = "time"
    return _pick(tried, method, tuple(weight.shape), complete)


def config_order(count: int, first: Iterable[int] = (), last: Iterable[int] = ()) -> list[int]:
    """The order in which a search tries config ids ``0 .. count - 1``.

    The ids in ``first`` come first, in their order; then every other id ascending; then those
    in ``last`` (an id in both goes last). Ids outside the range are dropped.

    Parameters
    ----------
    count : int
        How many config ids the problem has.
    first : iterable of int
        Ids to try before the others (the likeliest to win).
    last : iterable of int
        Ids to try after the others (ones that crashed a search before).

    Returns
    -------
    list of int
        Every id once.

    Examples
    --------
    >>> config_order(6, first=[4, 1], last=[1, 0])
    [4, 2, 3, 5, 1, 0]
    >>> config_order(3)
    [0, 1, 2]
    """
    late = [i for i in dict.fromkeys(last) if 0 <= i < count]
    early = [i for i in dict.fromkeys(first) if 0 <= i < count and i not in late]
    rest = [i for i in range(count) if i not in early and i not in late]
    return early + rest + late


def search_in_process(
    weight,
    cw,
    tokens,
    epilogue,
    method,
    out_dtype,
    rtol,
    iters,
    start,
    report,
    layout="cc",
    first: Iterable[int] = (),
    last: Iterable[int] = (),
    stop_at: float | None = None,
) -> None:
    """Try the configs from position ``start`` of their order on, reporting each as it comes.

    Random activations for ``tokens`` (padded as cuSPARSELt needs) are multiplied by the
    compressed weight under each config id; the product is checked against a float64 dense
    reference and, when correct, timed. Progress lines go to stdout as JSON (``{"max": n}``
    once, then ``{"try": id, "at": position}`` before each config), so that a parent process
    can resume after a config that kills this one. The order is :func:`config_order`'s. :func:`search_algorithm` calls it directly when
    ``isolate=False``, and through the child process otherwise.

    Parameters
    ----------
    weight : torch.Tensor
        The dense masked weight on the GPU (the reference).
    cw : CompressedTensor
        ``weight`` compressed for cuSPARSELt.
    tokens : int
        Token count to tune for.
    epilogue : {"none", "relu", "gelu"}
        The epilogue fused into the plans (applied to the reference too).
    method : {"time", "search"}
        With ``"search"`` and ``start == 0``, ``matmul_search``'s own choice is checked first
        and reported with no time; every config id is then timed either way.
    out_dtype : torch.dtype
        Dtype of the product.
    rtol : float
        Largest relative error (Frobenius norm) of a correct product.
    iters : int
        Timed iterations per config.
    start : int
        Position in the order of the first config to try (with no ``first`` or ``last``, the
        position is the config id).
    report : callable
        Called with ``(id, ms or None, status)`` for each config; status is ``"ok"``,
        ``"wrong"`` or ``"refused"``.
    layout : {"cc", "rr", "rc", "cr"}
        Operand layouts of the plans tried (see :mod:`explorer.gpu.library.cusparselt`).
    first, last : iterable of int
        Config ids to try first and last (:func:`config_order`).
    stop_at : float, optional
        A :func:`time.time` past which no further config is tried (the first one always is):
        the line ``{"stopped": position}`` then says where the search ended.
    """
    import json
    import time

    dev = weight.device.index or 0
    n = padded_tokens(tokens, cw.dtype)
    gen = torch.Generator(device=weight.device).manual_seed(0)
    if cw.dtype == torch.int8:
        x = torch.randint(-8, 8, (n, cw.shape[1]), device=weight.device, generator=gen)
        x = x.to(cw.dtype)
    else:
        x = torch.randn(n, cw.shape[1], device=weight.device, generator=gen).to(cw.dtype)
    ref = x.double() @ weight.double().t()
    if epilogue == "relu":
        ref = torch.relu(ref)
    elif epilogue == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    y = torch.empty(n, cw.shape[0], dtype=out_dtype, device=weight.device)
    if layout[1] == "r":  # the plan writes Y^T row-major
        y = torch.empty(cw.shape[0], n, dtype=out_dtype, device=weight.device).t()
    if layout[0] == "r":  # the plan reads X^T row-major
        x = x.t().contiguous()

    def _ok() -> bool:
        err = (y.double() - ref).norm() / ref.norm().clamp_min(1e-30)
        return bool(torch.isfinite(err)) and float(err) < rtol

    base = dict(
        m=cw.shape[0],
        n=n,
        k=cw.shape[1],
        dtype=str(cw.dtype).split(".")[-1],
        out_dtype=str(out_dtype).split(".")[-1],
        epilogue=epilogue,
        device=dev,
        layout=layout,
    )
    probe = Plan(PlanKey(**base))
    n_ids = probe.max_config_id()
    print(json.dumps({"max": n_ids}), flush=True)
    if method == "search" and start == 0:
        print(json.dumps({"try": -1}), flush=True)
        alg = probe.search(cw.data.data_ptr(), x.data_ptr(), y.data_ptr())
        probe.run(cw.data.data_ptr(), x.data_ptr(), y.data_ptr())
        torch.cuda.synchronize(dev)
        report((alg, None, "ok" if _ok() else "wrong"))
    probe.close()
    order = config_order(max(n_ids, 1), first, last)
    for at in range(start, len(order)):
        if stop_at is not None and at > start and time.time() >= stop_at:
            print(json.dumps({"stopped": at}), flush=True)
            return
        alg = order[at]
        print(json.dumps({"try": alg, "at": at}), flush=True)
        try:
            plan = Plan(PlanKey(**base, alg=alg))
        except CusparseltRefused:  # a config the library refuses for this shape
            report((alg, None, "refused"))
            continue
        try:
            if y.is_floating_point():
                y.fill_(float("nan"))
            plan.run(cw.data.data_ptr(), x.data_ptr(), y.data_ptr())
            torch.cuda.synchronize(dev)
            if not _ok():
                report((alg, None, "wrong"))
                continue
            ms = eager_ms(
                lambda p=plan: p.run(cw.data.data_ptr(), x.data_ptr(), y.data_ptr()),
                iters=iters,
                reps=1,
                warmup=3,
            )
            report((alg, ms, "ok"))
        finally:
            plan.close()


def _child_main(argv: list[str]) -> int:
    """Entry point of the isolated search child (``python -m explorer.gpu.library.search``)."""
    import json

    path, tokens, epilogue, method, out_dtype, rtol, iters, start, *rest = argv
    layout = rest[0] if rest else "cc"
    weight = torch.load(path).cuda()
    cw = compress(weight, check=False)

    def report(rec) -> None:
        print(json.dumps({"alg": rec[0], "ms": rec[1], "status": rec[2]}), flush=True)

    search_in_process(
        weight,
        cw,
        int(tokens),
        epilogue,
        method,
        getattr(torch, out_dtype),
        float(rtol),
        int(iters),
        int(start),
        report,
        layout,
    )
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_child_main(sys.argv[1:]))
