"""Where the CUDA sources are found (CPU), and the builds a file is compiled in (GPU)."""

import pytest

from explorer.gpu.cuda.sources import compiled_function, kernel_dir, kernel_source


def test_headers_are_pasted_in_place_of_their_include_lines():
    d = kernel_dir()
    header = (d / "overlap.cuh").read_text().rstrip("\n")
    for name in ("decode24_int4", "silu_mul"):
        raw = (d / f"{name}.cu").read_text()
        assert raw.count('#include "overlap.cuh"') == 1
        src = kernel_source(name)
        assert '#include "' not in src and src.count(header) == 1
        before, after = raw.split('#include "overlap.cuh"')
        assert src == before + header + after
    # a file without includes is compiled as it is
    assert kernel_source("decode24") == (d / "decode24.cu").read_text()


def test_a_missing_header_is_named(tmp_path, monkeypatch):
    from explorer.gpu.cuda import sources

    (tmp_path / "nm_check.cu").write_text("// marks the folder\n")
    (tmp_path / "broken.cu").write_text('#include "gone.cuh"\n__global__ void k() {}\n')
    monkeypatch.setattr(sources, "kernel_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match=r"broken\.cu includes 'gone\.cuh'"):
        kernel_source("broken")


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
