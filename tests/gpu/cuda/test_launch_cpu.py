"""Overlapped launches in :class:`explorer.gpu.cuda.launch.Launcher`, with stand-in drivers (CPU)."""

from __future__ import annotations

import ctypes

import pytest

from explorer.gpu.cuda import launch


class _Kernel:
    """Stands in for a compiled kernel: only its driver handle is read."""

    ptr = 1234


def _driver(name: str, seen: list, code: int = 0):
    def fire(handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        value = ctypes.c_uint64.from_address(
            ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p * 1)).contents[0]
        ).value
        seen.append((name, (gx, gy, gz), (bx, by, bz), shared, stream, value))
        return code

    return fire


def test_the_first_launch_is_ordinary_and_the_rest_overlapped():
    seen: list = []
    launcher = launch.Launcher(
        _Kernel(), ("u64",), driver=_driver("plain", seen), overlapped=_driver("over", seen)
    )
    assert launcher.overlapping and "overlapped" in repr(launcher)
    for value in (10, 11, 12):
        launcher.launch((4, 1, 1), (128, 1, 1), 64, 7, (value,))
    assert [s[0] for s in seen] == ["plain", "over", "over"]
    assert [s[-1] for s in seen] == [10, 11, 12]
    assert seen[-1][1:5] == ((4, 1, 1), (128, 1, 1), 64, 7)


def test_a_refused_overlapped_launch_is_made_again_in_order_and_overlap_stops():
    seen: list = []
    launcher = launch.Launcher(
        _Kernel(), ("u64",), driver=_driver("plain", seen), overlapped=_driver("over", seen, 801)
    )
    for value in (1, 2, 3):
        launcher.launch((1, 1, 1), (32, 1, 1), 0, 0, (value,))
    assert [s[0] for s in seen] == ["plain", "over", "plain", "plain"]
    assert [s[-1] for s in seen] == [1, 2, 2, 3]
    assert not launcher.overlapping and "overlapped" not in repr(launcher)


def test_a_launch_refused_both_ways_names_the_error():
    seen: list = []
    codes = iter((0, 700))  # the ordinary driver takes the first launch, then refuses

    def plain(*args):
        seen.append("plain")
        return next(codes)

    launcher = launch.Launcher(
        _Kernel(), ("u64",), driver=plain, overlapped=_driver("over", seen, 801)
    )
    launcher.launch((1, 1, 1), (32, 1, 1), 0, 0, (1,))
    with pytest.raises(launch.LaunchRefused, match="CUDA error 700"):
        launcher.launch((1, 1, 1), (32, 1, 1), 0, 0, (2,))
    assert [s if isinstance(s, str) else s[0] for s in seen] == ["plain", "over", "plain"]


def test_the_overlapped_driver_fills_the_launch_config_and_its_attribute():
    calls: list = []

    def launch_ex(config_ptr, function, params, extra):
        config = launch._LaunchConfig.from_address(config_ptr)
        attribute = config.attrs[0]
        calls.append(
            (
                (config.grid_x, config.grid_y, config.grid_z),
                (config.block_x, config.block_y, config.block_z),
                config.shared,
                config.stream,
                config.num_attrs,
                attribute.id,
                attribute.value,
                function,
                params,
            )
        )
        return 0

    driver = launch._OverlappedDriver(launch_ex)
    assert driver(55, 3, 2, 1, 256, 1, 1, 1024, 99, 4321, None) == 0
    assert driver(55, 5, 1, 1, 64, 2, 1, 0, 98, 4321, None) == 0
    assert calls[0] == ((3, 2, 1), (256, 1, 1), 1024, 99, 1, 6, 1, 55, 4321)
    assert calls[1][:4] == ((5, 1, 1), (64, 2, 1), 0, 98)
    assert ctypes.sizeof(launch._LaunchAttribute) == 72  # CUlaunchAttribute
    assert ctypes.sizeof(launch._LaunchConfig) == 56  # CUlaunchConfig


def test_the_environment_turns_overlap_off(monkeypatch):
    monkeypatch.setenv(launch.OVERLAP_ENV, "0")
    assert not launch.overlap_supported(0)  # decided before the GPU is asked


def test_overlap_needs_hopper_and_a_recent_driver(monkeypatch):
    monkeypatch.delenv(launch.OVERLAP_ENV, raising=False)
    monkeypatch.setattr(launch.torch.cuda, "get_device_capability", lambda device: (8, 0))
    assert not launch.overlap_supported(0)
    monkeypatch.setattr(launch.torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(launch, "_driver_ex", lambda: object())
    monkeypatch.setattr(launch, "_driver_version", lambda: 12020)
    assert not launch.overlap_supported(0)
    monkeypatch.setattr(launch, "_driver_version", lambda: 12030)
    assert launch.overlap_supported(0)
