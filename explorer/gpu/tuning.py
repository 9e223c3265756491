"""Algorithm tuning for cuSPARSELt plans, done safely and remembered.

cuSPARSELt's default algorithm is often far from its best one (on an H100 with cuSPARSELt 0.8,
bf16 at 4096 x 4096 with 1024 tokens: 0.82x dense with the default, 1.39x with the best), but
trying configs can kill the CUDA context (``matmul_search`` hit an illegal instruction on small
bf16 problems). So configs are only ever tried in a child process
(:func:`explorer.gpu.search.search_algorithm`), and what wins is kept here: in memory, and in a
JSON file under the explorer's cache folder keyed by GPU and library version, so later
processes reuse it. :class:`~explorer.gpu.SparseLinear` then times the remembered config
against the default in-process (both known to be safe) and keeps the faster correct one.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from explorer.dtypes import dtype_name, parse_dtype
from explorer.gpu import cusparselt as C
from explorer.gpu.child_process import SEARCH_BUDGET_S, child_lines

__all__ = [
    "TUNED_LAYOUTS",
    "Problem",
    "clear",
    "deferred_search",
    "lookup",
    "search_counts",
    "search_stats",
    "shipped_tables",
    "table_path",
    "tune_problems",
    "tune_weight",
]

#: Layouts tuned by default: ``Y`` row-major and ``Y^T`` from an input in the natural layout
#: (``rc``/``rr``, an input that is a transposed view, are tuned for the fused MLP's down
#: projection)
TUNED_LAYOUTS = ("cc", "cr")

#: At most this many token counts of one shape are searched by :func:`search_counts`; the
#: others take the config found at the nearest searched count (:func:`lookup`), which each
#: layer still times against the default before using it.
MAX_SEARCHED_COUNTS = 3

_LOCK = threading.Lock()
_TABLE: dict[str, int] | None = None
_PENDING: list[list] = []  # the problems of the open deferred_search() blocks, innermost last


def table_path() -> Path:
    """The JSON file of tuned algorithms (under ``$SPARSITY_EXPLORER_CACHE``).

    Examples
    --------
    >>> table_path().name
    'cusparselt-algorithms.json'
    """
    from explorer.results.store.location import cache_dir

    return cache_dir() / "cusparselt-algorithms.json"


def _device_id(device: int) -> str:
    try:
        version = C.library_version()
    except Exception:  # no library to ask: the table key says so instead of failing a lookup
        version = "unknown"
    return f"{torch.cuda.get_device_name(device)}|cusparselt {version}"


def _key(device: int, m, n, k, dtype, out_dtype, layout, epilogue) -> str:
    return "|".join(
        [_device_id(device), str(m), str(n), str(k), str(dtype), str(out_dtype), layout, epilogue]
    )


def shipped_tables() -> list[Path]:
    """The tables that ship inside the package (``explorer/data/cusparselt-*.json``), generated
    by ``sparsity-explorer tune`` on the GPUs they name; the user's own table wins over them.

    Examples
    --------
    >>> "cusparselt-h100.json" in [p.name for p in shipped_tables()]
    True
    """
    data = Path(__file__).resolve().parent.parent / "data"
    return sorted(data.glob("cusparselt-*.json"))


def _read(path: Path) -> dict[str, int]:
    try:
        return {str(k): int(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        import warnings

        warnings.warn(f"ignoring the unreadable tuning table {path}: {exc}", stacklevel=3)
        return {}


def _table() -> dict[str, int]:
    global _TABLE
    if _TABLE is None:
        table: dict[str, int] = {}
        for path in shipped_tables():
            table.update(_read(path))
        table.update(_read(table_path()))
        _TABLE = table
    return _TABLE


def lookup(
    device: int, m, n, k, dtype, out_dtype, layout, epilogue="none", nearest: bool = False
) -> int | None:
    """The tuned config id for this problem, or None if it was never tuned here.

    With ``nearest=True`` a problem never tuned at ``n`` tokens takes the config tuned for the
    same shape, dtypes and layout at the nearest token count (by ratio, within a factor of 8):
    a candidate the caller must still time against the default, never a verdict.
    """
    key = _key(device, m, n, k, dtype, out_dtype, layout, epilogue)
    with _LOCK:
        table = _table()
        found = table.get(key)
        if found is not None or not nearest:
            return found
        head = "|".join([_device_id(device), str(m)]) + "|"
        tail = "|" + "|".join([str(k), str(dtype), str(out_dtype), layout, epilogue])
        best, best_gap = None, math.log(8.0)
        for other, alg in table.items():
            if not (other.startswith(head) and other.endswith(tail)):
                continue
            tokens = other[len(head) : len(other) - len(tail)]
            if not tokens.isdigit() or int(tokens) < 1:
                continue
            gap = abs(math.log(int(tokens) / n))
            if gap < best_gap:
                best, best_gap = alg, gap
        return best


def search_counts(counts: Iterable[int], limit: int = MAX_SEARCHED_COUNTS) -> tuple[int, ...]:
    """The token counts worth an algorithm search, out of the counts a model runs at.

    Every count is kept when there are at most ``limit``; otherwise the largest, the smallest
    and the counts nearest to evenly spaced points between them (by ratio), so a search stays
    bounded per shape however many counts are asked for; the others reuse the nearest
    searched count's config (:func:`lookup` with ``nearest=True``).

    Examples
    --------
    >>> search_counts([4096, 16])
    (16, 4096)
    >>> search_counts([1, 8, 32, 256, 1024])
    (1, 32, 1024)
    """
    found = sorted({int(c) for c in counts if int(c) > 0})
    if len(found) <= limit or limit < 2:
        return tuple(found[-limit:]) if limit >= 1 else ()
    lo, hi = math.log(found[0]), math.log(found[-1])
    keep = {found[0], found[-1]}
    for i in range(1, limit - 1):
        target = lo + (hi - lo) * i / (limit - 1)
        keep.add(min(found, key=lambda c: abs(math.log(c) - target)))
    return tuple(sorted(keep))


@contextlib.contextmanager
def deferred_search(progress: bool = False) -> Iterator[list]:
    """Collect the searches :func:`tune_weight` asks for inside the block and run them all at
    its end in one child process (:func:`tune_problems`), instead of one child per problem.

    A model's layers are built inside the block and measured after it: a layer looks its
    tuned configs up when it first times its routes, so the batch lands in time. The searches
    count in :func:`search_stats` like any other. Blocks nest; the outermost one searches.

    Yields
    ------
    list of Problem
        The problems collected so far.

    Examples
    --------
    >>> with deferred_search() as pending:
    ...     pass
    >>> pending
    []
    """
    pending: list = []
    with _LOCK:
        _PENDING.append(pending)
    try:
        yield pending
    finally:
        with _LOCK:
            _PENDING.remove(pending)
            outer = _PENDING[-1] if _PENDING else None
        if outer is not None:
            outer.extend(pending)
        elif pending and torch.cuda.is_available():
            began = time.perf_counter()
            try:
                found = tune_problems(pending, progress=progress)
            finally:
                with _LOCK:
                    _SEARCHES[0] += len(pending)
                    _SEARCHES[1] += time.perf_counter() - began
            del found


def clear(disk: bool = False) -> None:
    """Forget the tuned algorithms (in memory; also the file with ``disk=True``)."""
    global _TABLE
    with _LOCK:
        _TABLE = {}
        if disk:
            table_path().unlink(missing_ok=True)


def _remember(found: dict[str, int], path: Path | None = None) -> None:
    """Add ``found`` to the table in memory and to the user's file (or ``path``)."""
    with _LOCK:
        _table().update(found)
        path = path or table_path()
        own = _read(path)
        own.update(found)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(own, indent=0, sort_keys=True))
            tmp.replace(path)
        except OSError as exc:  # a read-only cache: the table still lives for this process
            import warnings

            warnings.warn(f"tuned algorithms not saved to {path}: {exc}", stacklevel=3)


_SEARCHES = [0, 0.0]  # searches run in this process, and their seconds


def search_stats() -> tuple[int, float]:
    """``(searches, seconds)`` of the algorithm searches this process has run so far (each
    is one shape, token count and layout that no table knew).

    Examples
    --------
    >>> count, seconds = search_stats()
    >>> count >= 0 and seconds >= 0
    True
    """
    with _LOCK:
        return int(_SEARCHES[0]), float(_SEARCHES[1])


#: Weights with fewer entries than this are never searched: their product takes a few
#: microseconds, which launch costs dominate whatever the algorithm, and cuSPARSELt's configs
#: crash most often on such small shapes (each crash costs the search a child restart).
SEARCH_MIN_WEIGHTS = 1 << 18


def worth_searching(m: int, k: int) -> bool:
    """Whether an ``m x k`` weight is large enough to search its algorithm for.

    Examples
    --------
    >>> worth_searching(4096, 4096), worth_searching(1024, 512), worth_searching(512, 256)
    (True, True, False)
    """
    return m * k >= SEARCH_MIN_WEIGHTS


def tune_weight(
    weight: torch.Tensor,
    tokens: Iterable[int],
    out_dtype: torch.dtype | None = None,
    epilogue: str = "none",
    layouts: Iterable[str] = TUNED_LAYOUTS,
) -> dict[tuple[int, str], int]:
    """Find the fastest correct config for ``weight`` at each token count, in a child process.

    Parameters
    ----------
    weight : torch.Tensor
        The CUDA 2:4 weight ``[out, in]`` in the matmul's dtype (float16 or bfloat16).
    tokens : iterable of int
        Token counts to tune for (each is padded as the layer pads it).
    layouts : iterable of str
        Operand layouts to tune.

    Returns
    -------
    dict
        ``{(padded tokens, layout): config id}`` of what was found (and remembered).

    Examples
    --------
    >>> from explorer import make_mask
    >>> w = torch.randn(256, 512, dtype=torch.half, device="cuda")  # doctest: +GPU
    >>> w = w.masked_fill(~make_mask(w, "2:4"), 0)
    >>> sorted(tune_weight(w, tokens=[1024], layouts=["cc"]))
    [(1024, 'cc')]
    """
    from explorer.gpu.search import search_algorithm

    dtype = weight.dtype
    out_dtype = out_dtype or C.CUSPARSELT_DTYPES[dtype][0]
    dev = weight.device.index or 0
    m, k = weight.shape
    found: dict[tuple[int, str], int] = {}
    searching = worth_searching(m, k)  # else: the tables or the library's default algorithm
    for t in tokens:
        n = C.padded_tokens(int(t), dtype)
        for lay in layouts:
            key = _key(dev, m, n, k, dtype, out_dtype, lay, epilogue)
            with _LOCK:
                known = _table().get(key)
                pending = _PENDING[-1] if _PENDING else None
            if known is not None:
                found[(n, lay)] = known
                continue
            if not searching:
                continue
            if pending is not None and out_dtype == dtype and dev == 0:
                # searched with the rest of the model when the deferred_search block ends
                pending.append(Problem(m, n, k, dtype_name(dtype), lay, epilogue))
                continue
            began = time.perf_counter()
            try:
                res = search_algorithm(
                    None, weight, n, epilogue=epilogue, out_dtype=out_dtype, layout=lay
                )
            except RuntimeError:  # no config reproduced dense: keep the default
                continue
            finally:
                with _LOCK:
                    _SEARCHES[0] += 1
                    _SEARCHES[1] += time.perf_counter() - began
            _remember({key: int(res["alg"])})
            found[(n, lay)] = int(res["alg"])
    return found


@dataclass(frozen=True)
class Problem:
    """One matmul to tune: ``m`` outputs, ``n`` (padded) tokens, ``k`` inputs.

    Examples
    --------
    >>> Problem(4096, 4096, 4096, "bfloat16")
    Problem(4096x4096 @ 4096 tokens, bfloat16, cc)
    """

    m: int
    n: int
    k: int
    dtype: str = "float16"
    layout: str = "cc"
    epilogue: str = "none"

    def __repr__(self) -> str:
        return f"Problem({self.m}x{self.k} @ {self.n} tokens, {self.dtype}, {self.layout})"


def tune_problems(
    problems: Iterable[Problem],
    device: int = 0,
    table: Path | None = None,
    progress: bool = True,
    timeout: float = 900.0,
) -> dict[Problem, int | None]:
    """Tune many problems in one child process (restarted after a config that kills it).

    Each problem gets a random 2:4 weight (the choice depends on shapes and dtypes, not
    values); every config id is checked against the dense product and timed; the fastest
    correct one is remembered in the user's table (or ``table``). Problems already in the
    table are skipped.

    Returns
    -------
    dict
        ``{problem: config id}`` (None where no config reproduced the dense product).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> table = pathlib.Path(tempfile.mkdtemp()) / "algorithms.json"
    >>> found = tune_problems([Problem(256, 64, 512)], table=table, progress=False)  # doctest: +GPU
    >>> list(found), table.exists()
    ([Problem(256x512 @ 64 tokens, float16, cc)], True)
    """
    import subprocess
    import sys
    import tempfile

    from tqdm.auto import tqdm

    jobs = []
    for p in dict.fromkeys(problems):
        if not worth_searching(p.m, p.k):
            continue
        key = _key(
            device,
            p.m,
            p.n,
            p.k,
            _torch_dtype(p.dtype),
            _torch_dtype(p.dtype),
            p.layout,
            p.epilogue,
        )
        with _LOCK:
            if key in _table():
                continue
        jobs.append((p, key))
    results: dict[Problem, list] = {p: [] for p, _ in jobs}
    bar = tqdm(total=len(jobs), disable=not progress, desc="tune", unit="problem")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "jobs.json"
        spec.write_text(json.dumps([asdict(p) for p, _ in jobs]))
        job, alg = 0, 0
        ends: dict[int, float] = {}  # job -> time.monotonic() its search budget ends
        while job < len(jobs):
            cmd = [
                sys.executable,
                "-m",
                "explorer.gpu.tuning",
                str(spec),
                str(job),
                str(alg),
                str(device),
            ]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            current, tried = job, None
            state = {"job": job}
            for line in child_lines(proc, deadline=lambda s=state: ends.get(s["job"], math.inf)):
                if not line.startswith("{"):
                    continue
                rec = json.loads(line)
                if "job" in rec:
                    # a problem gets SEARCH_BUDGET_S from its first line on, restarts included
                    ends.setdefault(rec["job"], time.monotonic() + SEARCH_BUDGET_S)
                    state["job"] = rec["job"]
                    if rec["job"] != current:
                        bar.update(rec["job"] - current)
                        for j in range(current, rec["job"]):
                            _settle(jobs[j], results, table)  # kept even if a later one hangs
                    current, tried = rec["job"], None
                elif "try" in rec:
                    tried = rec["try"]
                elif "alg" in rec:
                    results[jobs[current][0]].append((rec["alg"], rec["ms"], rec["status"]))
                    tried = None
            code = proc.wait(timeout=timeout)  # at once: child_lines ends it when silent
            if code == 0:
                bar.update(len(jobs) - current)
                break
            if time.monotonic() >= ends.get(current, math.inf):  # budget spent: the next
                job, alg = current + 1, 0
                bar.update(1)
                continue
            # the child died inside config `tried` of job `current`: skip that config
            job, alg = current, (tried + 1 if tried is not None and tried >= 0 else 0)
            if tried is None:
                job, alg = current + 1, 0  # died outside any config: give up on this problem
            elif tried is not None:
                results[jobs[current][0]].append((tried, None, "crashed"))
    bar.close()
    return {job[0]: _settle(job, results, table) for job in jobs}


def _settle(job, results, table) -> int | None:
    """The fastest correct config of a finished job, remembered (None if there is none)."""
    problem, key = job
    good = [(ms, a) for a, ms, st in results[problem] if st == "ok" and ms is not None]
    if not good:
        return None
    alg = min(good)[1]
    with _LOCK:
        known = _table().get(key)
    if known != alg:
        _remember({key: alg}, table)
    return alg


def _torch_dtype(name: str) -> torch.dtype:
    try:
        return parse_dtype(name, allowed=C.CUSPARSELT_DTYPES)
    except ValueError:
        names = ", ".join(dtype_name(d) for d in C.CUSPARSELT_DTYPES)
        raise ValueError(f"dtype {name!r} cannot be tuned; expected one of {names}") from None


def _child(spec: str, job: int, alg: int, device: int) -> int:
    """The child of :func:`tune_problems`: tune jobs from ``job`` on, config ``alg`` first."""
    from explorer.gpu.search import search_in_process

    problems = [Problem(**p) for p in json.loads(Path(spec).read_text())]
    torch.cuda.set_device(device)
    for i in range(job, len(problems)):
        p = problems[i]
        print(json.dumps({"job": i}), flush=True)
        dtype = _torch_dtype(p.dtype)
        gen = torch.Generator(device=f"cuda:{device}").manual_seed(i)
        w = torch.randn(p.m, p.k, device=f"cuda:{device}", generator=gen)
        g = w.reshape(-1, 4)
        keep = torch.zeros_like(g, dtype=torch.bool).scatter_(
            1, g.abs().topk(2, dim=1).indices, True
        )
        w = (g * keep).reshape(p.m, p.k).to(dtype)
        cw = C.compress(w, check=False)

        def report(rec) -> None:
            print(json.dumps({"alg": rec[0], "ms": rec[1], "status": rec[2]}), flush=True)

        out = C.CUSPARSELT_DTYPES[dtype][0] if dtype.itemsize == 1 else dtype
        start = alg if i == job else 0
        search_in_process(w, cw, p.n, p.epilogue, "time", out, 2e-2, 10, start, report, p.layout)
        del w, cw
    return 0


if __name__ == "__main__":
    import sys

    spec, job, alg, device = sys.argv[1:5]
    sys.exit(_child(spec, int(job), int(alg), int(device)))
