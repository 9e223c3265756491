"""The batch search's parent on a CPU: a plain-Python child stands in for the GPU one.

The stand-in reads the same job file and speaks the same line protocol as
``python -m explorer.gpu.library.batch_search``; it crashes, hangs or sleeps where a test says,
and logs every config it tries, so the tests see the order, the restarts and the budgets.
"""

from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace

import pytest

from explorer.gpu.library import batch_search, child_process, tuning
from explorer.gpu.library.search import config_order
from explorer.gpu.library.tuning import Problem

CHILD = r"""
import json, os, sys, time
from explorer.gpu.library.child_process import search_stop
spec, job, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plan = json.loads(open(sys.argv[5]).read())
listed = json.loads(open(spec).read())
jobs, batch_end, cap = listed["jobs"], listed["batch_end"], listed["cap"]
work = [j["m"] * j["n"] * j["k"] for j in jobs]
log = open(plan["log"], "a")
open(plan["starts"], "a").write(f"{job}\n")
if plan.get("fail_at_start"):
    sys.stderr.write("ImportError: no module named cuda\n")
    sys.exit(1)
for i in range(job, len(jobs)):
    first, last = jobs[i]["first"], jobs[i]["last"]
    late = [a for a in dict.fromkeys(last) if 0 <= a < plan["ids"]]
    early = [a for a in dict.fromkeys(first) if 0 <= a < plan["ids"] and a not in late]
    order = early + [a for a in range(plan["ids"]) if a not in early and a not in late] + late
    stop_at = search_stop(time.time(), batch_end, work[i:], cap)
    if i == job and listed["resume"] is not None:
        stop_at = listed["resume"]
    print(json.dumps({"job": i}), flush=True)
    begin = start if i == job else 0
    for at in range(begin, len(order)):
        if not plan.get("ignore_stop") and at > begin and time.time() >= stop_at:
            print(json.dumps({"stopped": at}), flush=True)  # as search_in_process does
            break
        alg = order[at]
        print(json.dumps({"try": alg, "at": at}), flush=True)
        log.write(f"{i} {alg}\n"); log.flush()
        if alg in plan["crash"].get(str(i), []):
            sys.stderr.write("RuntimeError: an illegal instruction was encountered\n")
            sys.stderr.flush()
            os._exit(134)
        time.sleep(plan.get("sleep", 0.0))
        ms = plan["ms"].get(str(alg), 1.0 + alg)
        print(json.dumps({"alg": alg, "ms": ms, "status": "ok"}), flush=True)
"""


@pytest.fixture
def search(tmp_path, monkeypatch):
    """Run :func:`tune_problems` with the stand-in child; returns (run, tried-log reader)."""
    monkeypatch.setenv("SPARSITY_EXPLORER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tuning, "_device_id", lambda device: "GPU X|cusparselt 800")
    monkeypatch.setattr(tuning, "shipped_tables", lambda: [])
    tuning.clear()
    tuning._TABLE = None
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    log = tmp_path / "tried.txt"
    log.write_text("")
    starts = tmp_path / "starts.txt"
    starts.write_text("")

    def run(
        problems,
        ids=8,
        crash=None,
        sleep=0.0,
        ms=None,
        fail_at_start=False,
        ignore_stop=False,
        **kw,
    ):
        plan = tmp_path / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "log": str(log),
                    "starts": str(starts),
                    "ignore_stop": ignore_stop,
                    "ids": ids,
                    "crash": {str(k): v for k, v in (crash or {}).items()},
                    "sleep": sleep,
                    "ms": {str(k): v for k, v in (ms or {}).items()},
                    "fail_at_start": fail_at_start,
                }
            )
        )
        monkeypatch.setattr(
            batch_search,
            "_child_command",
            lambda spec, job, start, device: [
                sys.executable,
                str(child),
                str(spec),
                str(job),
                str(start),
                str(device),
                str(plan),
            ],
        )
        return batch_search.tune_problems(
            problems, table=tmp_path / "table.json", progress=False, **kw
        )

    def tried() -> list[tuple[int, int]]:
        return [tuple(int(v) for v in line.split()) for line in log.read_text().splitlines()]

    tried.starts = lambda: [int(v) for v in starts.read_text().split()]  # each child's first job
    yield run, tried
    tuning._TABLE = None


def _problems(count: int, n: int = 4096, layout: str = "cc") -> list[Problem]:
    return [Problem(1024 * (i + 1), n, 1024, "float16", layout) for i in range(count)]


def test_every_config_is_tried_and_the_fastest_remembered(search, tmp_path):
    run, tried = search
    problems = _problems(2)
    found = run(problems, ms={5: 0.5})
    assert dict(found) == {problems[0]: 5, problems[1]: 5}
    assert tried() == [(j, a) for j in range(2) for a in range(8)]
    saved = json.loads((tmp_path / "table.json").read_text())
    assert sorted(saved.values()) == [5, 5]
    assert not found.crashes and not found.cut_short and not found.not_started
    assert tuning.known_config(tuning.problem_key(problems[0])) == 5
    again = run(problems)  # known now: nothing is searched
    assert dict(again) == {} and len(tried()) == 16


def test_a_crashing_config_is_skipped_told_quietly_and_tried_last_by_later_problems(search, capfd):
    run, tried = search
    problems = _problems(3)
    found = run(problems, crash={0: [2]}, ms={2: 0.1})
    log = tried()
    assert [a for j, a in log if j == 0] == [0, 1, 2, 3, 4, 5, 6, 7]  # resumed after 2
    assert [a for j, a in log if j == 1] == [0, 1, 3, 4, 5, 6, 7, 2]  # 2 goes last
    assert [a for j, a in log if j == 2] == [0, 1, 3, 4, 5, 6, 7, 2]
    assert found[problems[0]] == 0  # the crashed config is never the answer
    assert found[problems[1]] == 2 and found[problems[2]] == 2
    assert [(p, alg) for p, alg, _ in found.crashes] == [(problems[0], 2)]
    assert "illegal instruction" in found.crashes[0][2]
    assert "illegal instruction" not in capfd.readouterr().err  # kept off the terminal


def test_a_crash_reorders_only_problems_of_the_same_dtype_and_layout(search):
    run, tried = search
    problems = [*_problems(1), *_problems(1, layout="cr")]
    run(problems, crash={0: [1]})
    assert [a for j, a in tried() if j == 1] == list(range(8))


def test_the_likeliest_configs_from_the_tables_go_first(search):
    run, tried = search
    known = {
        tuning._key(0, 4096, 4096, 4096, "torch.bfloat16", "torch.bfloat16", "cc", "none"): 6,
        tuning._key(0, 2048, 4096, 4096, "torch.bfloat16", "torch.bfloat16", "cc", "none"): 6,
        tuning._key(0, 2048, 4096, 8192, "torch.float16", "torch.float16", "cc", "none"): 3,
        tuning._key(0, 2048, 16, 4096, "torch.float16", "torch.float16", "cc", "none"): 7,
        tuning._key(0, 2048, 4096, 4096, "torch.float16", "torch.float16", "cr", "none"): 5,
    }
    tuning.remember(known)
    # the same dtype first, then by count; another token regime or layout does not count
    assert tuning.likely_configs(0, "float16", "cc", 4096) == (3, 6)
    assert tuning.likely_configs(0, "float16", "cc", 16) == (7,)
    run(_problems(1))
    assert [a for _, a in tried()] == [3, 6, 0, 1, 2, 4, 5, 7]
    other = "GPU Y|cusparselt 800|4096|16|4096|torch.float16|torch.float16|rr|none"
    tuning.remember({other: 2})  # where this GPU knows nothing, another GPU's winners count
    assert tuning.likely_configs(0, "float16", "rr", 16) == (2,)


def test_a_problem_whose_time_runs_out_keeps_the_best_config_it_tried(search, monkeypatch):
    run, tried = search
    monkeypatch.setattr(child_process, "SEARCH_BUDGET_S", 0.6)
    problems = _problems(2)
    found = run(problems, sleep=0.25, ms={0: 2.0, 1: 1.5})
    first = [a for j, a in tried() if j == 0]
    assert 1 <= len(first) < 8  # stopped early
    assert found[problems[0]] in first and found.cut_short == problems
    assert [a for j, a in tried() if j == 1]  # the next problem still ran
    assert tried.starts() == [0]  # in the same child: it stopped the first problem itself


def test_a_child_that_does_not_stop_is_ended_after_the_grace(search, monkeypatch):
    run, tried = search
    monkeypatch.setattr(child_process, "SEARCH_BUDGET_S", 0.6)
    monkeypatch.setattr(batch_search, "STOP_GRACE_S", 0.4)
    problems = _problems(2)
    found = run(problems, sleep=0.25, ms={0: 2.0, 1: 1.5}, ignore_stop=True)
    first = [a for j, a in tried() if j == 0]
    assert 1 <= len(first) < 8 and found[problems[0]] in first
    assert found.cut_short[:1] == [problems[0]]
    assert tried.starts()[:2] == [0, 1]  # ended, and a new child for the next problem


def test_the_batch_budget_bounds_the_whole_search(search):
    run, tried = search
    problems = _problems(4)
    found = run(problems, sleep=0.2, budget_s=2.0)
    # 2 s hold about 10 configs of 0.2 s, far from the 32 an unbounded search tries
    assert 1 <= len(tried()) < 4 * 8
    assert set(found) == set(problems)
    assert found.cut_short  # each share is too short for eight configs
    assert tried.starts() == [0]  # one child for the whole batch: no restart per problem
    stopped = set(found.cut_short) | set(found.not_started)
    assert all(found[p] is None for p in found.not_started)
    assert stopped and stopped <= set(problems)
    assert found.seconds >= 0.2 * len(tried())  # every config tried slept 0.2 s of it


def test_a_larger_product_gets_a_larger_share_of_a_bounded_batch(search):
    run, tried = search
    small = Problem(1024, 16, 1024, "float16")
    large = Problem(1024, 4096, 1024, "float16")
    found = run([small, large], ids=40, sleep=0.1, budget_s=5.0)
    counts = [sum(1 for j, _ in tried() if j == i) for i in range(2)]
    assert 1 <= counts[0] < counts[1]  # the small one first, yet the large one tries more
    assert found.cut_short == [small, large]


def test_a_child_that_cannot_start_stops_the_search_with_one_warning(search):
    run, tried = search
    problems = _problems(3)
    with pytest.warns(RuntimeWarning, match="no module named cuda") as caught:
        found = run(problems, fail_at_start=True)
    assert len(caught) == 1 and tried() == []
    assert found.not_started == problems and all(v is None for v in found.values())


def test_a_bad_budget_is_refused_with_the_value():
    with pytest.raises(ValueError, match="budget_s=0"):
        batch_search.tune_problems([], budget_s=0)


@pytest.mark.parametrize(
    ("count", "first", "last", "expected"),
    [
        (4, (), (), [0, 1, 2, 3]),
        (5, (3, 9, 3), (), [3, 0, 1, 2, 4]),  # duplicates and ids past the end dropped
        (5, (), (1,), [0, 2, 3, 4, 1]),
        (5, (2, 1), (2,), [1, 0, 3, 4, 2]),  # in both: last
    ],
)
def test_config_order_tries_every_id_once(count, first, last, expected):
    order = config_order(count, first, last)
    assert order == expected and sorted(order) == list(range(count))


def test_a_problem_resumed_after_a_crash_keeps_its_stop_time(search, monkeypatch):
    run, tried = search
    monkeypatch.setattr(child_process, "SEARCH_BUDGET_S", 2.0)
    problems = _problems(2)
    found = run(problems, ids=60, sleep=0.1, crash={0: [7]})
    assert tried.starts()[:2] == [0, 0]  # restarted once, inside the first problem
    first = [a for j, a in tried() if j == 0]
    # 2 s of configs in all for the first problem (about 20), not 2 s more after the restart
    assert 7 < len(first) <= 24 and 7 not in found.values()
    assert found.cut_short == problems and [a for j, a in tried() if j == 1]  # the next one ran


def test_the_child_reads_the_job_file_the_parent_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(child_process, "SEARCH_BUDGET_S", 15.0)
    problems = [Problem(4096, 4096, 4096, "float16"), Problem(1024, 16, 4096, "bfloat16", "rr")]
    orders = [{"first": [3, 1], "last": []}, {"first": [], "last": [7]}]
    spec = tmp_path / "jobs.json"
    now = time.time()
    # the child's clock held still, so the stop times are exact however loaded the machine is
    monkeypatch.setattr(batch_search, "time", SimpleNamespace(time=lambda: now))
    batch_search.write_jobs(spec, problems, orders, now + 10.0)
    jobs = list(batch_search.child_jobs(spec, 0, 2))
    assert [j[1] for j in jobs] == problems
    assert [(j[0], j[2], j[3], j[4]) for j in jobs] == [(0, [3, 1], [], 2), (1, [], [7], 0)]
    # the large product takes its share of the 10 s left, the small one keeps its second
    assert jobs[0][5] == now + 9.0
    assert jobs[1][5] == now + 10.0
    # a restarted child resumes a problem with the stop time it started with; no bound: 15 s
    batch_search.write_jobs(spec, problems, orders, None, resume=now + 1.5)
    resumed = list(batch_search.child_jobs(spec, 1, 4))
    assert [(j[0], j[4], j[5]) for j in resumed] == [(1, 4, now + 1.5)]
    batch_search.write_jobs(spec, problems, orders, None)
    unbounded = next(batch_search.child_jobs(spec, 0, 0))
    assert unbounded[5] == now + 15.0


def test_a_search_cut_to_its_share_of_a_bound_is_kept_for_this_process_only(
    search, tmp_path, monkeypatch
):
    run, _ = search
    problems = _problems(2)
    # a 1.5 s bound for two problems: each gets a share well under SEARCH_BUDGET_S
    found = run(problems, ids=40, sleep=0.1, ms={0: 2.0, 1: 1.5}, budget_s=1.5)
    assert found.cut_short == problems
    keys = [tuning.problem_key(p) for p in problems]
    assert [tuning.known_config(k) for k in keys] == [found[p] for p in problems]
    table = tmp_path / "table.json"
    written = json.loads(table.read_text()) if table.exists() else {}
    assert not set(keys) & set(written)  # partial answers are not written down
    # a later process (a fresh table) searches them again, and writes a whole search
    tuning._TABLE = None
    again = run(problems[:1], ids=4)  # config 0 the fastest (1 ms)
    assert again.cut_short == [] and again[problems[0]] == 0
    assert json.loads(table.read_text()) == {keys[0]: 0}


def test_a_search_cut_at_the_per_problem_budget_is_written(search, tmp_path, monkeypatch):
    # no bound on the batch: SEARCH_BUDGET_S is all any process would give the problem, so
    # the best config it found is the search's answer and is written to the table
    run, tried = search
    monkeypatch.setattr(child_process, "SEARCH_BUDGET_S", 0.6)
    problem = _problems(1)[0]
    found = run([problem], ids=40, sleep=0.1, ms={0: 2.0, 1: 1.5})
    assert found.cut_short == [problem] and len(tried()) < 40
    key = tuning.problem_key(problem)
    assert json.loads((tmp_path / "table.json").read_text()) == {key: found[problem]}
