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
