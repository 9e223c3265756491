"""SparseOptions: one checked, frozen set of build options (no GPU needed)."""

import dataclasses

import pytest
import torch

from explorer.gpu.modules.sparse_options import SparseOptions


def test_defaults_and_repr():
    options = SparseOptions()
    assert (options.dtype, options.layout, options.output) == (None, "auto", "rows")
    assert not options.decode and not options.keep_dense and options.tune_tokens == ()
    assert repr(options) == "SparseOptions(dtype=auto, layout=auto, output=rows)"
    full = SparseOptions(torch.bfloat16, "rr", "any", True, True, [16, 4096])
    assert repr(full) == (
        "SparseOptions(dtype=bfloat16, layout=rr, output=any, decode, keep_dense, "
        "tune_tokens=(16, 4096))"
    )


def test_frozen_and_replace_checks_again():
    options = SparseOptions(tune_tokens=[16])
    assert options.tune_tokens == (16,)  # a list becomes a tuple: hashable, comparable
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.decode = True
    changed = options.replace(decode=True, dtype=torch.int8)
    assert changed.decode and changed.dtype == torch.int8 and not options.decode
    with pytest.raises(ValueError, match="layout 'x' unknown"):
        options.replace(layout="x")
    with pytest.raises(TypeError, match="unknown sparse layer option 'decoder'"):
        options.replace(decoder=True)


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"dtype": torch.float32}, TypeError, "float32 is not supported"),
        ({"output": "columns"}, ValueError, "output 'columns' unknown"),
        ({"tune_tokens": (16, 0)}, ValueError, "positive integers, got 0"),
        ({"tune_tokens": (True,)}, ValueError, "positive integers, got True"),
        ({"tune_tokens": (1.5,)}, ValueError, "positive integers, got 1.5"),
    ],
)
def test_bad_options_name_the_value(fields, error, match):
    with pytest.raises(error, match=match):
        SparseOptions(**fields)


def test_every_sparse_dtype_is_accepted():
    for dtype in (torch.float16, torch.bfloat16, torch.int8, torch.float8_e4m3fn):
        assert SparseOptions(dtype=dtype).dtype == dtype
