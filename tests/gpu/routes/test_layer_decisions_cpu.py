"""A layer's decisions read per execution mode: pure rules, no GPU."""

from __future__ import annotations

import pickle

import pytest

from explorer.gpu.routes.dispatch import DECODE, DENSE, Decision, Route
from explorer.gpu.routes.layer_decisions import LayerDecisions

SPARSE = Route("sparse", "cc", 3)
OP_MS = 0.020


def _book(mode="auto", dense=True):
    book = LayerDecisions(mode)
    # 16 tokens: the decode kernel wins on the GPU and by the wall clock
    book.remember(
        16, Decision({DENSE: 0.010, DECODE: 0.006}, {DENSE: 0.02, DECODE: 0.015}), OP_MS, dense
    )
    # 4096 tokens: a long matmul, sparse wins by more than the op's host time
    book.remember(
        4096, Decision({DENSE: 0.40, SPARSE: 0.30}, {DENSE: 0.41, SPARSE: 0.31}), OP_MS, dense
    )
    return book


@pytest.mark.parametrize(
    ("mode", "traced_16", "needs_dense"),
    [
        ("auto", True, True),
        ("compile", True, True),
        ("eager", True, False),
        ("graphs", False, False),
    ],
)
def test_decode_sizes_trace_dense_unless_the_gpu_clock_rules(mode, traced_16, needs_dense):
    book = _book(mode)
    assert book.traces_dense(16) is traced_16
    assert not book.traces_dense(4096)  # sparse beats dense by more than the op costs
    assert not book.traces_dense(128)  # never measured: the op decides at each call
    assert book.needs_dense() is needs_dense


@pytest.mark.parametrize("mode", ["auto", "compile"])
def test_a_decode_call_the_compiled_operator_makes_is_not_traced_dense(mode):
    """With the operator loaded, the decode kernel's call costs less host time than a dense
    matmul: a default-mode compiled model calls it at decode sizes, unless the whole-model eager
    check kept the count dense (its compiled calls would run the eager dense route)."""
    book = LayerDecisions(mode)
    won = Decision({DENSE: 0.010, DECODE: 0.006}, {DENSE: 0.02, DECODE: 0.015})
    book.remember(16, won, OP_MS, True, program=True)
    assert not book.traces_dense(16)
    book.keep_dense_at(16)  # the whole-model eager check kept 16 tokens dense
    assert book.traces_dense(16)
    book.keep_dense_at(16, keep=False)
    assert not book.traces_dense(16)
    lost = Decision({DENSE: 0.010, DECODE: 0.012}, {DENSE: 0.02, DECODE: 0.025})
    book.remember(8, lost, OP_MS, True, program=True)  # dense by the wall clock: traced
    assert book.traces_dense(8)
    book.remember(16, won, OP_MS, True)  # no operator: the op's host time is never won back
    assert book.traces_dense(16)


def test_without_the_dense_weight_nothing_is_traced_dense():
    book = _book()
    book.close_dense()
    assert not book.traces_dense(16)
    assert not _book(dense=False).traces_dense(16)


def test_switching_modes_rereads_the_same_decisions():
    book = _book("graphs")
    assert not book.traces_dense(16)
    book.set_mode("auto")
    assert book.traces_dense(16)
    assert book.routes("gpu")[16][0] == DECODE and book.routes()[4096][0] == SPARSE
    with pytest.raises(ValueError, match="unknown"):
        book.set_mode("reduce-overhead")


def test_eager_verdicts_reach_the_nearest_decode_sizes_only():
    book = _book()
    assert not book.eager_dense(16)  # no whole-model check ran
    book.keep_dense_at(16)
    assert book.eager_dense(16) and book.eager_dense(1) and not book.eager_dense(4096)
    book.keep_dense_at(16, keep=False)
    assert not book.eager_dense(1)


def test_forgetting_decode_and_everything():
    book = _book()
    lost = Decision({DENSE: 0.010, DECODE: 0.012}, {DENSE: 0.02, DECODE: 0.025})
    book.remember(8, lost, OP_MS, True)  # timed, but lost to dense by both clocks
    book.forget_decode()
    assert set(book.measured()) == {8, 4096}  # 16 chose the decode kernel: forgotten
    assert book.measured()[8] == Decision({DENSE: 0.010}, {DENSE: 0.02})
    assert book.traces_dense(8)
    book.forget()
    assert book.measured() == {} and not book.traces_dense(16)
    assert repr(book) == "LayerDecisions(mode=auto, 0 token counts)"


def test_decisions_survive_a_pickle():
    book = _book()
    twin = pickle.loads(pickle.dumps(book))
    assert twin.measured() == book.measured() and twin.traces_dense(16)
    assert "16 decode" in repr(twin) and "4096 sparse cc alg 3" in repr(twin)


@pytest.mark.parametrize(
    ("mode", "traced", "needs_dense"),
    [
        ("auto", True, True),
        ("compile", True, True),
        ("eager", True, True),
        ("graphs", False, False),
    ],
)
def test_a_prefill_count_kept_dense_eagerly_is_traced_dense_too(mode, traced, needs_dense):
    book = _book(mode, dense=True)
    book.keep_dense_at(4096)  # the whole model lost with sparse routes there (host-bound)
    assert book.traces_dense(4096) is traced
    assert book.needs_dense() is needs_dense
    book.keep_dense_at(4096, keep=False)  # a later check passed: the op decides again
    assert not book.traces_dense(4096)


def test_an_eager_verdict_keeps_a_dense_weight_no_clock_chose():
    book = LayerDecisions("auto")
    book.remember(
        4096, Decision({DENSE: 0.40, SPARSE: 0.30}, {DENSE: 0.41, SPARSE: 0.31}), OP_MS, True
    )
    assert not book.needs_dense()  # sparse wins by every clock: the dense weight could go
    book.keep_dense_at(4096)
    assert book.needs_dense()  # the eager check runs the count dense: it needs the weight
    book.close_dense()
    assert not book.traces_dense(4096)  # nothing left to trace


def _small(book: LayerDecisions) -> set[int]:
    return {t for t in range(1, 65) if book.traced_small >> t & 1}


@pytest.mark.parametrize("mode", ["auto", "compile", "eager", "graphs"])
def test_the_one_int_verdict_names_the_traced_decode_sizes_and_no_other(mode):
    book = _book(mode)
    book.keep_dense_at(4096)
    assert _small(book) == {t for t in range(1, 65) if book.traces_dense(t)}
    assert not book.traced_small >> 4096 & 1 and book.traced_small < 1 << 65  # only small counts
    assert set(book.traced_large) == {t for t in (4096,) if book.traces_dense(t)}


def test_the_one_int_verdict_follows_every_change_of_the_decisions():
    book = _book("auto")
    assert _small(book) == {16}
    book.set_mode("graphs")  # the GPU clock chose the decode kernel at 16
    assert _small(book) == set()
    book.set_mode("auto")
    book.remember(
        1, Decision({DENSE: 0.010, SPARSE: 0.009}, {DENSE: 0.02, SPARSE: 0.05}), OP_MS, True
    )
    assert _small(book) == {1, 16}
    book.close_dense()
    assert book.traced_small == 0
    other = _book()
    other.forget()
    assert other.traced_small == 0
    assert pickle.loads(pickle.dumps(_book())).traced_small == 1 << 16


def test_the_large_counts_verdict_follows_the_eager_check_and_the_dense_weight():
    book = LayerDecisions("auto")
    sparse_wins = Decision({DENSE: 0.40, SPARSE: 0.30}, {DENSE: 0.41, SPARSE: 0.31})
    book.remember(4096, sparse_wins, OP_MS, True)
    book.remember(1024, Decision({DENSE: 0.10, SPARSE: 0.12}, {}), OP_MS, True)
    assert book.traced_large == (1024,)  # 4096: the sparse op pays there
    book.keep_dense_at(4096)
    assert book.traced_large == (1024, 4096)  # the whole-model check kept it dense
    book.keep_dense_at(4096, keep=False)
    assert book.traced_large == (1024,)
    book.close_dense()
    assert book.traced_large == () and book.traced_small == 0


def test_decisions_pickled_before_the_one_int_verdict_trace_nothing_small_until_they_change():
    book = _book()
    del book.__dict__["traced_small"]  # what a pickle of an older version holds
    del book.__dict__["traced_large"]
    twin = pickle.loads(pickle.dumps(book))
    assert twin.traced_small == 0 and twin.traces_dense(16)  # the general path still decides
    assert twin.traced_large == ()
    twin.set_mode("auto")
    assert twin.traced_small == 1 << 16


def test_small_row_bits_name_the_bare_product_and_the_op_per_row_count():
    from explorer.gpu.routes.layer_decisions import OP_BITS_AT, SMALL_ROWS_UP_TO, small_row_bits

    traced = 1 << 1 | 1 << 16  # 1 and 16 rows traced dense
    bits = small_row_bits(traced, plain_dense=True, fp8_dense=False)
    for rows in range(1, SMALL_ROWS_UP_TO + 1):
        dense = rows in (1, 16)
        assert (bits >> rows & 1, bits >> OP_BITS_AT + rows & 1) == (dense, not dense), rows
    assert bits & 1 == 0 and bits >> OP_BITS_AT & 1 == 0  # no row count 0
    assert bits >> OP_BITS_AT + SMALL_ROWS_UP_TO + 1 == 0  # nothing above 64 rows
    # an activation after the product: a traced count is neither bit (the general path)
    with_act = small_row_bits(traced, plain_dense=False, fp8_dense=False)
    assert with_act & ((1 << OP_BITS_AT) - 1) == 0 and with_act >> OP_BITS_AT == bits >> OP_BITS_AT
    assert small_row_bits(traced, plain_dense=True, fp8_dense=True) == 0  # FP8 dense: general


def test_every_recount_of_the_traced_counts_reaches_the_callback_and_copies_drop_it():
    seen = []
    book = LayerDecisions("auto", on_traced=seen.append)
    book.remember(
        16, Decision({DENSE: 0.010, DECODE: 0.006}, {DENSE: 0.02, DECODE: 0.03}), OP_MS, True
    )
    assert seen[-1] == book.traced_small == 1 << 16  # traced dense by the wall clock
    book.set_mode("graphs")
    assert seen[-1] == book.traced_small == 0  # the GPU clock chose the decode kernel
    book.set_mode("auto")
    book.keep_dense_at(16, False)
    book.close_dense()
    assert seen[-1] == 0 and len(seen) == 5
    copied = pickle.loads(pickle.dumps(book))
    assert copied.on_traced is None and copied.traced_small == book.traced_small
    assert book.on_traced is not None  # the original keeps its callback
