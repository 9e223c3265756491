"""The low-bit decode kernel's launch choices (CPU): token tiles, defaults the kernels take,
refusals of settings they are not built for."""

from __future__ import annotations

import pytest
import torch

from explorer.gpu.cuda.coded_launch import (
    CHUNK,
    Int4LaunchConfig,
    default_int4_config,
    kernel_build,
    launch_config,
    token_tiles,
)


# -- launch configurations ------------------------------------------------------------------------
def test_token_tiles():
    assert [token_tiles(t) for t in range(1, 65)] == ([1] * 8 + [2] * 8 + [4] * 16 + [8] * 32)


@pytest.mark.parametrize(("rows", "k"), [(4096, 4096), (1024, 4096), (14336, 4096), (16, 128)])
@pytest.mark.parametrize("tokens", [1, 4, 16, 32, 64])
def test_default_config_is_one_the_kernel_takes(rows, k, tokens):
    config = default_int4_config(rows, k, tokens, 132)
    config.check(token_tiles(tokens))
    many = rows // 16 >= 4 * 132
    staged = many and tokens > 1
    assert config.method == (("spa" if staged else "sp") if tokens <= 8 else "ex")
    assert config.shared <= 48 * 1024 and config.warps <= max(1, k // CHUNK)
    name = config.kernel_name(torch.float16, tokens)
    assert name.startswith(f"int4_{config.method}_f16_t{8 * token_tiles(tokens)}_")


@pytest.mark.parametrize(("rows", "k"), [(4096, 4096), (1024, 4096), (14336, 4096), (16, 128)])
@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_int8_default_config_fits_its_larger_stages(rows, k, tokens):
    config = default_int4_config(rows, k, tokens, 132, "int8")
    config.check(token_tiles(tokens))
    assert config.format == "int8" and config.shared <= 48 * 1024
    assert config.kernel_name(torch.bfloat16, tokens).startswith(f"int8_{config.method}_bf16_")
    # a staged int8 chunk is a 1344-byte tile: fewer warps fit than for int4
    assert Int4LaunchConfig("spa", 8, 4, "int8").max_warps(1) == 8
    assert Int4LaunchConfig("spa", 8, 4).max_warps(1) == 12
    assert "fmt='int8'" in repr(config)


def test_config_refuses_unknown_settings():
    with pytest.raises(ValueError, match="method"):
        Int4LaunchConfig("dense")
    with pytest.raises(ValueError, match="ahead"):
        Int4LaunchConfig("sp", 4, 3)
    with pytest.raises(ValueError, match=r"built for \(2, 4\)"):
        Int4LaunchConfig("spa", 4, 1)
    with pytest.raises(ValueError, match="expected 1 to 12 warps"):  # shared memory
        Int4LaunchConfig("spa", 16, 4).check(1)
    with pytest.raises(ValueError, match="expected 1 to 8 warps"):
        Int4LaunchConfig("ex", 16, 1).check(8)
    with pytest.raises(ValueError, match="fmt = 'int2'"):
        Int4LaunchConfig("sp", 4, 1, "int2")


def test_a_launch_is_checked_against_the_weight_it_runs():
    given = Int4LaunchConfig("sp", 4, 1, group_size=64)
    assert launch_config(given, 4096, 4096, 16, 0, "int4", 64) is given
    thirty_two = Int4LaunchConfig("ex", 4, 1, group_size=32)
    assert launch_config(thirty_two, 4096, 4096, 16, 0, "int4", 32) is thirty_two
    with pytest.raises(ValueError, match="groups of 64 columns and the weight has groups of 128"):
        launch_config(given, 4096, 4096, 16, 0, "int4", 128)
    with pytest.raises(ValueError, match="for int4 codes and the weight holds int8"):
        launch_config(given, 4096, 4096, 16, 0, "int8", 64)
    with pytest.raises(ValueError, match="warps = 64"):
        launch_config(Int4LaunchConfig("sp", 64, 1), 4096, 4096, 16, 0, "int4", 256)


def test_groups_of_64_and_32_take_their_own_build():
    assert kernel_build(128) == kernel_build(256) == ()
    assert kernel_build(64) == (("CHUNK_SCALES", 2),)
    assert Int4LaunchConfig("ex", 8, 1, group_size=32).defines == (("CHUNK_SCALES", 4),)
    with pytest.raises(ValueError, match="group_size = 48"):
        Int4LaunchConfig("sp", 8, 1, group_size=48)
