import json

import pytest

from explorer import Pattern
from explorer.patterns import as_pattern


@pytest.mark.parametrize(
    ("spec", "kind", "density"),
    [
        ("2:4", "nm", 0.5),
        ("1:4", "nm", 0.25),
        ("4:8", "nm", 0.5),
        ("unstructured:0.5", "unstructured", 0.5),
        ("unstructured-row:0.9", "unstructured", pytest.approx(0.1)),
        ("block16:0.75", "block", 0.25),
        ("block64x64:0.5", "block", 0.5),
        ("rows:0.25", "rows", 0.75),
    ],
)
def test_parse(spec, kind, density):
    p = Pattern.parse(spec)
    assert p.kind == kind
    assert p.density == density
    assert Pattern.parse(p.name) == p  # the canonical name reads back
    assert Pattern.from_json(p.to_json()) == p
    assert json.loads(p.to_json())["kind"] == kind
    assert p.explain().endswith(".")
    assert repr(p) == f"Pattern({p.name!r})"
    assert p.name in p._repr_html_()


def test_parse_passes_patterns_through():
    p = Pattern.parse("2:4")
    assert as_pattern(p) is p
    assert p.is_24 and p.is_nm and not Pattern.parse("4:8").is_24


def test_explain_teaches():
    assert "2 of every 4" in Pattern.parse("2:4").explain()
    assert "tensor cores" in Pattern.parse("2:4").explain()
    assert "every output row" in Pattern.parse("unstructured-row:0.5").explain()
    assert "16 x 16" in Pattern.parse("block16:0.5").explain()


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("3:2", "1 <= N < M"),
        ("4:4", "1 <= N < M"),
        ("0:4", "1 <= N < M"),
        ("1:64", "32"),
        ("unstructured:1.5", "[0, 1)"),
        ("unstructured:abc", "[0, 1)"),
        ("block16x8:0.5", "square"),
        ("rows:-0.1", "[0, 1)"),
        ("banana", "expected one of"),
        ("", "expected one of"),
    ],
)
def test_bad_strings_name_the_value(spec, words):
    with pytest.raises(ValueError) as info:
        Pattern.parse(spec)
    assert repr(spec) in str(info.value)
    assert words in str(info.value)


def test_non_string_is_a_type_error():
    with pytest.raises(TypeError, match="2:4"):
        Pattern.parse(0.5)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"kind": "nm", "n": 0, "m": 4}, "1 <= N < M"),
        ({"kind": "nm", "n": 5, "m": 4}, "1 <= N < M"),
        ({"kind": "nm", "n": 2, "m": 5}, "power of two"),
        ({"kind": "nm", "n": 2.0, "m": 4}, "whole numbers"),
        ({"kind": "nm", "n": 2, "m": 4, "sparsity": 0.5}, "takes no sparsity=0.5"),
        ({"kind": "unstructured", "sparsity": 1.0}, "[0, 1)"),
        ({"kind": "unstructured", "sparsity": float("nan")}, "[0, 1)"),
        ({"kind": "rows"}, "sparsity=None"),
        ({"kind": "rows", "sparsity": 0.5, "per_row": True}, "takes no per_row=True"),
        ({"kind": "block", "sparsity": 0.5, "block": 0}, "block side"),
        ({"kind": "diagonal", "sparsity": 0.5}, "kind='diagonal'"),
    ],
)
def test_constructor_and_json_check_like_parse(fields, words):
    # Every way of building a Pattern goes through one validation path.
    with pytest.raises(ValueError, match=None) as info:
        Pattern(**fields)
    assert words in str(info.value)
    with pytest.raises(ValueError) as info:
        Pattern.from_json(json.dumps(fields))
    assert words in str(info.value) and "pattern JSON" in str(info.value)


@pytest.mark.parametrize("spec", ["2:5", "3:6", "1:3", "unstructured:nan", "rows:1"])
def test_parse_refuses_odd_group_sizes_and_full_sparsity(spec):
    with pytest.raises(ValueError) as info:
        Pattern.parse(spec)
    assert repr(spec) in str(info.value)


def test_from_json_names_unknown_keys_and_bad_text():
    with pytest.raises(ValueError, match="unknown keys 'nn'"):
        Pattern.from_json('{"kind": "nm", "nn": 2, "m": 4}')
    with pytest.raises(ValueError, match="cannot be read"):
        Pattern.from_json("2:4")
    assert Pattern.from_json('{"kind": "rows", "sparsity": 0}').sparsity == 0.0


def test_allow_empty_round_trips_and_is_explicit():
    p = Pattern.parse("rows:0.99", allow_empty=True)
    assert p.allow_empty and Pattern.from_json(p.to_json()) == p
    assert Pattern.parse(Pattern.parse("rows:0.99"), allow_empty=True) == p
    with pytest.raises(ValueError, match="allow_empty"):
        Pattern.parse("rows:0.99").keep_count(10, "rows")
    assert Pattern.parse("rows:0.9").keep_count(10, "rows") == 1


def test_check_pattern_cannot_be_handed_an_impossible_pattern():
    import torch

    from explorer import check_pattern

    assert not check_pattern(torch.ones(4, 8), "2:4").valid
    with pytest.raises(ValueError):
        check_pattern(torch.ones(4, 8), Pattern(kind="nm", n=5, m=4))


@pytest.mark.parametrize(
    "spec",
    ["２:４", "٢:٤", "2:4\u3000", "block１６:0.5", "unstructured:０.５", "rows:0.２５"],
)
def test_only_ascii_digits_are_read(spec):
    with pytest.raises(ValueError, match="ASCII"):
        Pattern.parse(spec)


@pytest.mark.parametrize("text", ["nan", "inf", "0_5", "0x1", "-0.5", ""])
def test_sparsity_must_be_a_plain_decimal(text):
    with pytest.raises(ValueError, match=f"sparsity {text!r} must be a fraction"):
        Pattern.parse(f"unstructured:{text}")


@pytest.mark.parametrize(("text", "value"), [(".5", 0.5), ("5e-1", 0.5), ("0", 0.0), ("0.", 0.0)])
def test_decimal_spellings_still_parse(text, value):
    assert Pattern.parse(f"rows:{text}").sparsity == value
