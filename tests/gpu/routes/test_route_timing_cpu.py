"""RouteBook: measuring once per problem, sharing, nearest counts (fake timers, no GPU)."""

from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision, Route
from explorer.gpu.routes.route_timing import RouteBook

SPARSE = Route("sparse", "cc")


def _timer(times):
    calls = []

    def timer(call):
        route = call()
        calls.append(route)
        return times[route]

    return timer, calls


def test_decide_times_each_route_once_and_keeps_both_clocks():
    book = RouteBook()
    timer, called = _timer({DENSE: (1.0, 1.0), SPARSE: (0.6, 1.4), DECODE: (None, 0.9)})
    found = book.decide("p", 16, {r: (lambda r=r: r) for r in (DENSE, SPARSE, DECODE)}, timer)
    assert sorted(map(str, called)) == sorted(map(str, (DENSE, SPARSE, DECODE)))
    assert found.route("gpu") == SPARSE  # decode could not be captured: no GPU time
    assert found.route("wall") == DECODE
    assert DECODE not in found.gpu
    assert book.decided("p", 16) is found and book.decided("p", 1) is None
    assert len(book) == 1 and "1 problems" in repr(book)


def test_no_calls_decides_nothing():
    book = RouteBook()
    assert book.decide("p", 16, {}) is None
    assert len(book) == 0


def test_nearest_takes_the_closest_measured_count():
    book = RouteBook()
    book.record("p", 16, Decision({DENSE: 1.0, SPARSE: 0.5}, {DENSE: 1.0, SPARSE: 2.0}))
    book.record("p", 4096, Decision({DENSE: 1.0, SPARSE: 2.0}, {DENSE: 1.0, SPARSE: 2.0}))
    assert book.nearest("p", 8, "gpu") == SPARSE
    assert book.nearest("p", 8, "wall") == DENSE
    assert book.nearest("p", 8192, "gpu") == DENSE
    assert book.nearest("other", 8, "gpu") is None


def test_carry_without_dense_moves_only_sparse_choices():
    book = RouteBook()
    kept = ("layer", 1024, True)
    book.record(kept, 16, Decision({DENSE: 1.0, SPARSE: 0.5}, {DENSE: 1.0, SPARSE: 0.6}))
    book.record(kept, 1, Decision({DENSE: 1.0, SPARSE: 0.5}, {DENSE: 1.0, SPARSE: 2.0}))
    book.record(("other", 1024, True), 16, Decision({SPARSE: 0.1}, {SPARSE: 0.1}))
    book.carry_without_dense(lambda problem: problem[0] == "layer")
    moved = book.decided(("layer", 1024, False), 16)
    assert moved is not None and DENSE not in moved.gpu and DENSE not in moved.wall
    assert book.decided(("layer", 1024, False), 1) is None  # wall chose dense there
    assert book.decided(("other", 1024, False), 16) is None  # not matched
    book.clear()
    assert len(book) == 0


def test_carry_without_decode_keeps_every_count_less_the_decode_times():
    book = RouteBook()
    kept = ("layer", 1024, True, False)  # decode weight kept, dense weight gone
    # 16 tokens: the decode kernel won on the GPU; without it, sparse is what is left
    book.record(kept, 16, Decision({SPARSE: 0.5, DECODE: 0.4}, {SPARSE: 0.6, DECODE: 0.7}))
    book.record(kept, 1, Decision({DECODE: 0.3}, {DECODE: 0.3}))  # nothing else timed
    without = ("layer", 1024, False, False)
    book.record(without, 4096, Decision({SPARSE: 2.0}, {SPARSE: 2.1}))
    book.record(("other", 1024, True, False), 16, Decision({SPARSE: 0.1}, {SPARSE: 0.1}))
    book.carry_without_decode(lambda problem: problem[0] == "layer")
    moved = book.decided(without, 16)
    assert moved == Decision({SPARSE: 0.5}, {SPARSE: 0.6})
    assert moved.route("gpu") == SPARSE and moved.route("wall") == SPARSE
    assert book.decided(without, 1) is None  # only the decode kernel was timed: measure again
    assert book.decided(without, 4096) == Decision({SPARSE: 2.0}, {SPARSE: 2.1})  # untouched
    assert book.decided(("other", 1024, False, False), 16) is None  # not matched
    assert book.decided(kept, 16).route("gpu") == DECODE  # the source is left as it was


def test_the_default_timer_evicts_l2_only_at_decode_sizes(monkeypatch):
    from explorer.gpu.routes import route_timing

    seen = []

    def fake(call, cold=False):
        seen.append((call(), cold))
        return 1.0, 1.0

    monkeypatch.setattr(route_timing, "time_both_clocks", fake)
    book = RouteBook()
    for tokens in (1, route_timing.COLD_UP_TO, route_timing.COLD_UP_TO + 1, 4096):
        book.decide("p", tokens, {DENSE: lambda t=tokens: t})
    assert seen == [(1, True), (64, True), (65, False), (4096, False)]
