import pytest
import torch

from explorer.dtypes import DTYPES, SPARSE_DTYPES, dtype_name, parse_dtype


def test_every_alias_parses_to_its_dtype_and_names_back_to_one_name():
    for alias, dtype in DTYPES.items():
        assert parse_dtype(alias) is dtype
        assert parse_dtype(alias.upper()) is dtype
        assert parse_dtype(f"torch.{alias}") is dtype
        assert dtype_name(alias) == dtype_name(dtype) == str(dtype).removeprefix("torch.")


def test_a_dtype_passes_through_and_an_unknown_name_names_the_choices():
    assert parse_dtype(torch.float64) is torch.float64
    with pytest.raises(ValueError, match=r"unknown dtype 'fp13'.*'bf16'"):
        parse_dtype("fp13")
    with pytest.raises(ValueError, match="unknown --dtypes 3"):
        parse_dtype(3, what="--dtypes")


def test_allowed_narrows_what_is_accepted():
    assert parse_dtype("bf16", allowed=SPARSE_DTYPES) is torch.bfloat16
    with pytest.raises(ValueError, match="expected one of float16, bfloat16, int8"):
        parse_dtype(torch.float32, allowed=SPARSE_DTYPES)


def test_dtype_name_keeps_names_outside_the_table():
    assert dtype_name(torch.complex64) == "complex64"
    assert dtype_name("auto") == "auto"
