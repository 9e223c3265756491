"""Many algorithm searches in one child process, each bounded, the whole batch bounded too.

:func:`tune_problems` searches the cuSPARSELt config of each
:class:`~explorer.gpu.library.tuning.Problem` in one child process
(``python -m explorer.gpu.library.batch_search``), restarted after a config that kills it, and
remembers the fastest correct config of each in the tuning table. Three rules keep a model's
search short when its plans are slow to make (a float16 plan costs about 0.25 s in cuSPARSELt 0.8,
so trying every config of one problem takes about a minute):

* **a budget per problem and for the batch.** A problem may try configs for at most
  :data:`~explorer.gpu.library.child_process.SEARCH_BUDGET_S`; with ``budget_s`` each problem also
  gets no more than its share of what is left, in proportion to its multiply-adds among the
  problems left and at least
  :data:`~explorer.gpu.library.child_process.MIN_SHARE_S`
  (:func:`~explorer.gpu.library.child_process.search_stop`): a prefill-sized product, whose
  config matters most, gets more time than a decode-sized one. A problem that finishes early
  hands its time on, and the batch ends within ``budget_s``, child starts and restarts
  included. The child stops a problem itself when its time is spent, after the config in hand,
  and goes on to the next one in the same process: a child start (importing torch, setting up
  CUDA) costs seconds, as much as a short share. The parent ends a child only
  :data:`~explorer.gpu.library.child_process.STOP_GRACE_S` after a problem's time (a child
  stuck in a config) or at the batch's end. A problem whose time runs out keeps the best config
  it tried. Where that time was a share of the batch's bound, shorter than
  :data:`~explorer.gpu.library.child_process.SEARCH_BUDGET_S`, the config is kept in this
  process only: it is not written to the table, so a later process searches it again, each
  time with the shares of fewer problems. Where it was the whole per-problem budget, no later
  search would get more, and the config is written. One never started keeps the library's
  default;
* **the likeliest configs first.** Configs that were fastest most often in the tables for the
  same layout and a similar token count (:func:`~explorer.gpu.library.tuning.likely_configs`)
  are tried before the rest (:func:`~explorer.gpu.library.search.config_order`), so a short
  share still tries the configs most likely to win;
* **a crashing config goes last.** A config that killed the child is tried after every other
  for the later problems of the same dtype and layout, so one crash does not cost a restart per
  problem.

The child's error output goes to a file, not to the terminal: each crash is counted, with the
last line the child wrote (:class:`SearchResults`).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import torch

from explorer.gpu.library import child_process
from explorer.gpu.library import cusparselt as C
from explorer.gpu.library.child_process import (
    STOP_GRACE_S,
    child_lines,
    search_share,
    search_stop,
)
from explorer.gpu.library.tuning import (
    Problem,
    known_config,
    likely_configs,
    problem_key,
    remember,
    tunable_dtype,
    worth_searching,
)

__all__ = ["MODEL_SEARCH_BUDGET_S", "SearchResults", "child_jobs", "tune_problems", "write_jobs"]

#: Seconds the search :func:`explorer.sparsify` runs for one model's unknown shapes may take in
#: all, child starts and restarts included (the issue's bound is 60 s for up to eight shapes).
MODEL_SEARCH_BUDGET_S = 50.0


class SearchResults(dict):
    """``{problem: config id or None}`` of a batch search, with what happened on the way.

    A dict like any other (None where no config reproduced the dense product, or where the
    problem was never searched), plus the batch's ``seconds``; ``cut_short``, the problems
    whose time ran out (they keep the best config they tried); ``not_started``, those the
    batch's budget never reached (they keep the library's default); and ``crashes``, each
    ``(problem, config id, last line of the child's error output)``.

    Examples
    --------
    >>> SearchResults({Problem(4096, 16, 4096, "float16"): 17}, seconds=3.25)
    SearchResults(1 problem in 3.2 s, 0 cut short, 0 not started, 0 crashed configs)
    """

    def __init__(self, found=(), seconds: float = 0.0) -> None:
        super().__init__(found)
        self.seconds = float(seconds)
        self.cut_short: list[Problem] = []
        self.not_started: list[Problem] = []
        self.crashes: list[tuple[Problem, int, str]] = []

    def __repr__(self) -> str:
        n = len(self)
        return (
            f"SearchResults({n} problem{'s' if n != 1 else ''} in {self.seconds:.1f} s, "
            f"{len(self.cut_short)} cut short, {len(self.not_started)} not started, "
            f"{len(self.crashes)} crashed configs)"
        )


def _last_line(path: Path) -> str:
    """The last non-empty line a child wrote to its error file ("" if none)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _crash_class(problem: Problem) -> tuple:
    """Problems that share crashing configs: same dtype, layout, epilogue and token regime."""
    return (problem.dtype, problem.layout, problem.epilogue, problem.n >= 256)


def tune_problems(
    problems: Iterable[Problem],
    device: int = 0,
    table: Path | None = None,
    progress: bool = True,
    timeout: float = 900.0,
    budget_s: float | None = None,
) -> SearchResults:
    """Tune many problems in one child process (restarted after a config that kills it).

    Each problem gets a random 2:4 weight (the choice depends on shapes and dtypes, not
    values); configs are tried likeliest first, each checked against the dense product and
    timed; the fastest correct one is remembered in the user's table (or ``table``). Problems
    already in the table are skipped. See the module's docstring for the budgets.

    Parameters
    ----------
    problems : iterable of Problem
        The problems to tune; duplicates and weights too small to search are skipped.
    device : int, default 0
        The CUDA device index.
    table : Path, optional
        The table to remember results in (default: the user's).
    progress : bool, default True
        Show a progress bar.
    timeout : float, default 900.0
        Seconds to wait for a child to exit once its output has ended.
    budget_s : float, optional
        Seconds the whole batch may take, child starts included (default: no bound beyond
        each problem's ``SEARCH_BUDGET_S``).

    Returns
    -------
    SearchResults
        ``{problem: config id}`` (None where no config reproduced the dense product or the
        problem was not started), with the problems cut short and the crashes.

    Raises
    ------
    ValueError
        For a ``budget_s`` that is not a positive number.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> table = pathlib.Path(tempfile.mkdtemp()) / "algorithms.json"
    >>> found = tune_problems([Problem(1024, 64, 512)], table=table, progress=False)  # doctest: +GPU
    >>> list(found), table.exists()
    ([Problem(1024x512 @ 64 tokens, float16, cc)], True)
    """
    import subprocess
    import tempfile

    from tqdm.auto import tqdm

    if budget_s is not None and not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise ValueError(f"budget_s={budget_s!r} must be a positive number of seconds, or None")
    began = time.monotonic()
    batch_end = began + budget_s if budget_s is not None else math.inf
    jobs = [
        (p, problem_key(p, device))
        for p in dict.fromkeys(problems)
        if worth_searching(p.m, p.k) and known_config(problem_key(p, device)) is None
    ]
    results: dict[Problem, list] = {p: [] for p, _ in jobs}
    work = [p.m * p.n * p.k for p, _ in jobs]
    out = SearchResults()
    crashed: dict[tuple, list[int]] = {}  # crash class -> configs that killed a child
    orders = [
        {"first": list(likely_configs(device, p.dtype, p.layout, p.n)), "last": []} for p, _ in jobs
    ]
    cut: set[int] = set()  # jobs whose time ran out: they keep the best config they tried
    # jobs given less than a whole SEARCH_BUDGET_S (a share of the batch's bound): cut short,
    # their best config is kept for this process only, as a later one may have more time
    shared: set[int] = set()
    # the batch's end on the wall clock, which the child reads too
    wall_end = time.time() + budget_s if budget_s is not None else None
    bar = tqdm(total=len(jobs), disable=not progress, desc="tune", unit="problem")
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "jobs.json"
        job, start, restarts = 0, 0, 0
        ends: dict[int, float] = {}  # job -> time.monotonic() its search ends

        def end_of(j: int) -> float:
            if j not in ends:  # a problem's time counts from its first line, restarts included
                now, cap = time.monotonic(), child_process.SEARCH_BUDGET_S
                end = None if math.isinf(batch_end) else batch_end
                ends[j] = search_stop(now, end, work[j:], cap)
                # compared as shares, not as ends minus now: that difference rounds either way
                if search_share(batch_end - now, work[j:]) < cap:
                    shared.add(j)
            return ends[j]

        while job < len(jobs) and time.monotonic() < batch_end:
            # a problem resumed after a crash keeps the stop time it started with
            resume = time.time() + ends[job] - time.monotonic() if job in ends else None
            write_jobs(spec, [p for p, _ in jobs], orders, wall_end, resume)
            cmd = _child_command(spec, job, start, device)
            errors = Path(tmp) / f"stderr-{restarts}.txt"
            restarts += 1
            with errors.open("w") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
                current, tried = job, None
                state = {"job": None}

                def deadline(s=state) -> float:
                    if s["job"] is None:
                        return batch_end
                    return min(end_of(s["job"]) + STOP_GRACE_S, batch_end)

                for line in child_lines(proc, deadline=deadline):
                    if not line.startswith("{"):
                        continue
                    rec = json.loads(line)
                    if "job" in rec:
                        state["job"] = rec["job"]
                        end_of(rec["job"])
                        if rec["job"] != current:
                            bar.update(rec["job"] - current)
                            for j in range(current, rec["job"]):
                                out[jobs[j][0]] = _settle(
                                    jobs[j], results, table, j in cut & shared
                                )
                        current, tried = rec["job"], None
                    elif "try" in rec:
                        tried = (rec["try"], rec.get("at", rec["try"]))
                    elif "stopped" in rec:  # the child spent this problem's time and goes on
                        cut.add(current)
                        tried = None
                    elif "alg" in rec:
                        results[jobs[current][0]].append((rec["alg"], rec["ms"], rec["status"]))
                        tried = None
                code = proc.wait(timeout=timeout)  # at once: child_lines ends it when silent
            if code == 0:
                for j in range(current, len(jobs)):
                    out[jobs[j][0]] = _settle(jobs[j], results, table, j in cut & shared)
                bar.update(len(jobs) - current)
                break
            if time.monotonic() >= min(ends.get(current, math.inf) + STOP_GRACE_S, batch_end):
                if current in ends:  # its time is spent: it keeps the best config it tried
                    cut.add(current)
                    partial = current in shared
                    out[jobs[current][0]] = _settle(jobs[current], results, table, partial)
                    job, start = current + 1, 0
                    bar.update(1)
                continue  # (one never started is left to the batch's end)
            if state["job"] is None:  # it failed before its first problem: so would the next
                out.crashes.append((jobs[current][0], -1, _last_line(errors)))
                warnings.warn(
                    "the cuSPARSELt algorithm search stopped: its child process failed before "
                    f"its first problem ({_last_line(errors) or f'exit code {code}'}); the "
                    "remaining shapes keep the library's default algorithm",
                    RuntimeWarning,
                    stacklevel=2,
                )
                break
            if tried is None:  # died between configs: give up on this problem
                out.crashes.append((jobs[current][0], -1, _last_line(errors)))
                out[jobs[current][0]] = _settle(jobs[current], results, table, True)
                job, start = current + 1, 0
                bar.update(1)
                continue
            # the child died inside config `tried` of job `current`: go on after it
            alg, at = tried
            problem = jobs[current][0]
            results[problem].append((alg, None, "crashed"))
            out.crashes.append((problem, alg, _last_line(errors)))
            bad = crashed.setdefault(_crash_class(problem), [])
            if alg not in bad:
                bad.append(alg)
            for j in range(current + 1, len(jobs)):  # later problems like it try it last
                if _crash_class(jobs[j][0]) == _crash_class(problem):
                    orders[j]["last"] = list(bad)
            job, start = current, at + 1
    bar.close()
    for j, (p, key) in enumerate(jobs):  # those the batch's budget stopped
        if p in out:
            continue
        if results[p]:
            cut.add(j)
            out[p] = _settle((p, key), results, table, True)
        else:
            out.not_started.append(p)
            out[p] = None
    out.cut_short = [jobs[j][0] for j in sorted(cut)]
    out.seconds = time.monotonic() - began
    return out


def _child_command(spec: Path, job: int, start: int, device: int) -> list[str]:
    """The command line of a search child: jobs from ``job`` on, config position ``start``."""
    import sys

    return [sys.executable, "-m", __name__, str(spec), str(job), str(start), str(device)]


def _settle(job, results, table, partial: bool) -> int | None:
    """The fastest correct config of a finished job, remembered (None if there is none).

    A ``partial`` search (its time ran out, or it gave up after a crash) is remembered for this
    process only, so that a later one searches it again instead of keeping a partial answer.
    """
    problem, key = job
    good = [(ms, a) for a, ms, st in results[problem] if st == "ok" and ms is not None]
    if not good:
        return None
    alg = min(good)[1]
    if known_config(key) != alg:
        remember({key: alg}, table, persist=not partial)
    return alg


def write_jobs(
    spec: Path,
    problems: list[Problem],
    orders: list[dict],
    batch_end: float | None,
    resume: float | None = None,
) -> None:
    """Write the job file a search child reads (:func:`child_jobs`).

    Parameters
    ----------
    spec : Path
        The file.
    problems : list of Problem
        The batch's problems, in order.
    orders : list of dict
        Each problem's ``{"first": [...], "last": [...]}`` config ids.
    batch_end : float or None
        The :func:`time.time` at which the batch ends; None for no bound.
    resume : float, optional
        The stop time of the problem a restarted child resumes.
    """
    listed = [{**asdict(p), **o} for p, o in zip(problems, orders, strict=True)]
    cap = child_process.SEARCH_BUDGET_S
    spec.write_text(
        json.dumps({"batch_end": batch_end, "cap": cap, "resume": resume, "jobs": listed})
    )


def child_jobs(spec: str | Path, job: int, start: int):
    """The problems a search child runs, read from the parent's job file, with their stop times.

    The child's side of the file :func:`tune_problems` writes (kept apart from the GPU work so
    that it is tested on any machine): each problem from ``job`` on, the configs to try first
    and last, the position to begin at and the :func:`time.time` its search stops at
    (:func:`~explorer.gpu.library.child_process.search_stop`, as the parent counts it; for a
    problem resumed after a crash, the stop time it started with).

    Parameters
    ----------
    spec : str or Path
        The job file.
    job, start : int
        The first problem to run, and the position in its config order to begin at.

    Yields
    ------
    tuple
        ``(index, problem, first, last, begin, stop_at)``, each read when the problem starts.
    """
    listed = json.loads(Path(spec).read_text())
    jobs, batch_end, cap, resume = (listed[k] for k in ("jobs", "batch_end", "cap", "resume"))
    work = [j["m"] * j["n"] * j["k"] for j in jobs]
    for i in range(job, len(jobs)):
        entry = dict(jobs[i])
        first, last = entry.pop("first", []), entry.pop("last", [])
        stop_at = search_stop(time.time(), batch_end, work[i:], cap)  # as the parent counts it
        if i == job and resume is not None:
            stop_at = resume  # (resumed after a crash: the time it started with)
        yield i, Problem(**entry), first, last, start if i == job else 0, stop_at


def _child(spec: str, job: int, start: int, device: int) -> int:
    """The child of :func:`tune_problems`: tune jobs from ``job`` on, at position ``start``."""
    from explorer.gpu.library.search import search_in_process

    torch.cuda.set_device(device)
    for i, p, first, last, begin, stop_at in child_jobs(spec, job, start):
        print(json.dumps({"job": i}), flush=True)
        dtype = tunable_dtype(p.dtype)
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
        search_in_process(
            w, cw, p.n, p.epilogue, "time", out, 2e-2, 10, begin, report, p.layout, first, last,
            stop_at=stop_at,
        )  # fmt: skip
        del w, cw
    return 0


if __name__ == "__main__":
    import sys

    spec_arg, job_arg, start_arg, device_arg = sys.argv[1:5]
    sys.exit(_child(spec_arg, int(job_arg), int(start_arg), int(device_arg)))
