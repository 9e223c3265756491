import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given

from explorer import Pattern, check_pattern, make_mask, masks
from explorer.masks import top_k_mask


def test_hand_computed_magnitude_24():
    w = torch.arange(1.0, 9.0).reshape(1, 8)
    assert make_mask(w, "2:4").int().tolist() == [[0, 0, 1, 1, 0, 0, 1, 1]]


def test_negative_weights_rank_by_magnitude():
    w = torch.tensor([[-4.0, 1.0, -0.5, 3.0]])
    assert make_mask(w, "2:4").tolist() == [[True, False, False, True]]


def test_ties_keep_the_lower_index():
    w = torch.ones(2, 8)
    assert make_mask(w, "2:4").int().tolist() == [[1, 1, 0, 0, 1, 1, 0, 0]] * 2
    assert make_mask(w.half(), "2:4").int().tolist() == [[1, 1, 0, 0, 1, 1, 0, 0]] * 2
    assert make_mask(w, "1:4").int().tolist() == [[1, 0, 0, 0, 1, 0, 0, 0]] * 2
    assert make_mask(w, "unstructured:0.5").int().tolist() == [[1] * 8, [0] * 8]


def test_scores_override_magnitude():
    w = torch.arange(1.0, 9.0).reshape(1, 8)
    scores = torch.tensor([[9.0, 8, 1, 1, 9, 1, 8, 1]])
    assert make_mask(w, "2:4", scores=scores).int().tolist() == [[1, 1, 0, 0, 1, 0, 1, 0]]


def test_deterministic():
    w = torch.randn(64, 128)
    assert torch.equal(make_mask(w), make_mask(w.clone()))


@given(
    rows=st.integers(1, 12),
    groups=st.integers(1, 6),
    nm=st.sampled_from([(1, 4), (2, 4), (3, 4), (2, 8), (4, 8), (1, 2)]),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
    seed=st.integers(0, 2**16),
    quantize=st.booleans(),
)
def test_any_nm_mask_passes_check(rows, groups, nm, dtype, seed, quantize):
    n, m = nm
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, groups * m, generator=g)
    if quantize:  # many ties
        w = w.round()
    w = w.to(dtype)
    mask = make_mask(w, f"{n}:{m}")
    assert mask.dtype == torch.bool and mask.shape == w.shape
    assert (mask.view(rows, groups, m).sum(-1) == n).all()  # exactly n kept per group
    assert check_pattern(mask, f"{n}:{m}").valid
    assert check_pattern(w * mask, f"{n}:{m}").valid
    # the fast 16-bit path and the float path agree, ties included
    assert torch.equal(mask, make_mask(w.double(), f"{n}:{m}"))


@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 20),
    sparsity=st.floats(0.0, 0.95),
    per_row=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_unstructured_keeps_exactly_the_rounded_count(rows, cols, sparsity, per_row, seed):
    w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)).round()
    spec = f"unstructured{'-row' if per_row else ''}:{sparsity}"
    mask = make_mask(w, Pattern.parse(spec, allow_empty=True))  # tiny layers may keep nothing
    density = Pattern.parse(spec).density
    if per_row:
        assert (mask.sum(1) == round(density * cols)).all()
    else:
        assert int(mask.sum()) == round(density * rows * cols)
    # everything kept scores at least as high as everything dropped
    if mask.any() and (~mask).any():
        if per_row:
            for r in range(rows):
                kept, dropped = w[r][mask[r]].abs(), w[r][~mask[r]].abs()
                if kept.numel() and dropped.numel():
                    assert kept.min() >= dropped.max()
        else:
            assert w[mask].abs().min() >= w[~mask].abs().max()
    assert check_pattern(mask, spec).valid


def test_block_mask_keeps_whole_blocks_by_norm():
    w = torch.zeros(4, 8)
    w[0:2, 4:6] = 10.0  # block (0, 2) strongest
    w[2:4, 0:2] = 5.0  # block (1, 0) second
    mask = make_mask(w, "block2:0.75")  # keep 2 of 8 blocks
    expected = torch.zeros(4, 8, dtype=torch.bool)
    expected[0:2, 4:6] = True
    expected[2:4, 0:2] = True
    assert torch.equal(mask, expected)
    assert check_pattern(mask, "block2:0.75").valid


def test_row_mask_keeps_the_strongest_rows():
    w = torch.tensor([[1.0, 1.0], [5.0, 0.0], [0.1, 0.1], [3.0, 3.0]])
    mask = make_mask(w, "rows:0.5")
    assert mask.all(1).tolist() == [False, True, False, True]
    assert not mask[[0, 2]].any()


def test_top_k_mask_columns():
    s = torch.tensor([[1.0, 5.0], [3.0, 5.0], [2.0, 1.0]])
    assert top_k_mask(s, 1, dim=0).tolist() == [[False, True], [True, False], [False, False]]


@pytest.mark.parametrize(
    ("weight", "error", "words"),
    [
        (torch.randn(8), ValueError, "2-D"),
        (torch.randn(2, 3, 8), ValueError, "flatten"),
        (torch.randn(4, 6), ValueError, "divisible by 4"),
        (torch.ones(4, 8, dtype=torch.int32), TypeError, "scores="),
        (torch.ones(4, 8, dtype=torch.bool), TypeError, "scores="),
        (torch.tensor([[1.0, float("nan"), 0.0, 1.0]]), ValueError, "NaN"),
        (torch.tensor([[1.0, float("inf"), 0.0, 1.0]]), ValueError, "NaN or infinite"),
        (torch.empty(0, 8), ValueError, "empty"),
        (torch.empty(4, 8, device="meta"), ValueError, "meta"),
        ([[1.0, 2.0, 3.0, 4.0]], TypeError, "torch.Tensor"),
        (torch.nn.Linear(8, 4), TypeError, "layer.weight"),
    ],
)
def test_bad_weights(weight, error, words):
    with pytest.raises(error, match=words):
        make_mask(weight, "2:4")


def test_bad_scores():
    w = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"shape \(4, 4\)"):
        make_mask(w, scores=torch.randn(4, 4))
    with pytest.raises(TypeError, match="bool"):
        make_mask(w, scores=torch.ones(4, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        make_mask(w, scores=torch.full((4, 8), float("nan")))
    assert make_mask(w.int(), scores=w.abs()).sum() == 16  # integer weights with scores work


def test_block_and_rows_shape_errors():
    with pytest.raises(ValueError, match="out_features"):
        make_mask(torch.randn(10, 16), "block4:0.5")
    with pytest.raises(ValueError, match="unknown sparsity pattern"):
        make_mask(torch.randn(4, 8), "2-4")


@pytest.mark.parametrize(
    ("spec", "shape", "what"),
    [
        ("unstructured:0.99999", (8, 16), "128 weights"),
        ("unstructured-row:0.97", (4, 16), "16 weights of a row"),
        ("rows:0.99", (10, 8), "10 rows"),
        ("block4:0.9", (8, 8), "4 blocks"),
    ],
)
def test_a_sparsity_that_empties_the_layer_is_refused_unless_allowed(spec, shape, what):
    w = torch.randn(*shape)
    with pytest.raises(ValueError, match="allow_empty=True") as info:
        make_mask(w, spec)
    assert repr(spec) in str(info.value) and what in str(info.value)
    assert not make_mask(w, Pattern.parse(spec, allow_empty=True)).any()


FP8 = [
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    if hasattr(torch, name)
]


@pytest.mark.parametrize("dtype", FP8)
@pytest.mark.parametrize(
    "spec", ["2:4", "1:8", "unstructured:0.5", "unstructured-row:0.25", "block4:0.5", "rows:0.5"]
)
def test_fp8_weights_get_the_mask_of_their_float32_values(dtype, spec):
    g = torch.Generator().manual_seed(3)
    w8 = torch.randn(8, 16, generator=g).to(dtype)
    mask = make_mask(w8, spec)
    assert mask.dtype == torch.bool and torch.equal(mask, make_mask(w8.float(), spec))
    assert check_pattern(w8.float() * mask, spec).valid
    # fp8 scores rank the same way too.
    assert torch.equal(make_mask(w8.float(), spec, scores=w8.float().abs().to(dtype)), mask)


def test_fp8_exponent_only_weights_and_ties():
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if e8m0 is None:
        pytest.skip("this torch has no float8_e8m0fnu")
    w = torch.tensor([[1.0, 4.0, 4.0, 2.0]]).to(e8m0)
    assert make_mask(w).tolist() == [[False, True, True, False]]


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_nan_is_refused_by_position(dtype):
    w = torch.ones(2, 8).to(dtype)
    w[1, 5] = float("nan")
    with pytest.raises(ValueError, match=r"weight holds 1 NaN .* at \(1, 5\)"):
        make_mask(w)


def test_storage_only_dtypes_are_refused_with_a_hint():
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    if fp4 is None:
        pytest.skip("this torch has no float4_e2m1fn_x2")
    packed = torch.zeros(4, 8, dtype=torch.uint8).view(fp4)
    with pytest.raises(TypeError, match=r"float4_e2m1fn_x2.*storage-only.*float16"):
        make_mask(packed)
    with pytest.raises(TypeError, match="storage-only"):
        check_pattern(packed)


@given(
    rows=st.integers(1, 40),
    groups=st.integers(1, 12),
    n=st.integers(1, 3),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.int32, torch.uint8]),
    seed=st.integers(0, 2**16),
)
def test_six_comparisons_agree_with_the_ranking_of_any_group_size(rows, groups, n, dtype, seed):
    # Scores drawn from a few values, so ties are common; ties go to the earlier column.
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 4, (rows, 4 * groups), generator=g).to(dtype)
    assert torch.equal(
        masks._top_of_four(lambda a, b: scores[a:b], scores.shape, n, scores.device),
        masks._nm_mask(scores, n, 4),
    )
