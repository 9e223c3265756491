"""Where the CUDA sources are found (CPU), and the builds a file is compiled in (GPU)."""

import pytest

from explorer.gpu.cuda.sources import compiled_function, kernel_dir


def test_kernel_sources_found():
    d = kernel_dir()
    assert {"nm_check.cu", "nm_mask.cu", "block_density.cu", "silu_mul.cu"} <= {
        p.name for p in d.iterdir()
    }
    assert (d / "decode24_int4.cu").read_text().count("#ifndef CHUNK_SCALES") == 1


@pytest.mark.gpu
def test_each_build_of_a_file_is_compiled_once_and_kept_apart():
    default = compiled_function("decode24_int4", "int4_sp_bf16_t8_d1", 0)
    groups_of_64 = compiled_function(
        "decode24_int4", "int4_sp_bf16_t8_d1", 0, (("CHUNK_SCALES", 2),)
    )
    assert default is compiled_function("decode24_int4", "int4_sp_bf16_t8_d1", 0)
    assert groups_of_64 is not default
    assert groups_of_64 is compiled_function(
        "decode24_int4", "int4_sp_bf16_t8_d1", 0, [("CHUNK_SCALES", 2)]
    )
