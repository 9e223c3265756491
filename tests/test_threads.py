"""The CPU thread policy: capped at the free cores, restored afterwards, same results."""

from __future__ import annotations

import pytest
import torch

from explorer import _threads, check_pattern, checks, make_mask, masks
from explorer._threads import (
    available_cores,
    fair_cpu_threads,
    fair_thread_count,
    one_cpu_thread,
    steady_cpu_threads,
)

needs_threads = pytest.mark.skipif(
    torch.get_num_threads() < 2, reason="torch runs one thread here; nothing to cap"
)


@needs_threads
def test_a_busy_machine_gets_one_thread_and_the_count_comes_back(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(_threads, "busy_elsewhere", lambda: 64)
    assert fair_thread_count() == 1
    with pytest.raises(RuntimeError, match="inside"):
        with fair_cpu_threads() as threads:
            assert threads == 1 == torch.get_num_threads()
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before


@needs_threads
def test_an_idle_machine_keeps_torch_threads(monkeypatch):
    monkeypatch.setattr(_threads, "busy_elsewhere", lambda: 0)
    monkeypatch.setattr(_threads, "available_cores", lambda: 64)
    with fair_cpu_threads() as threads:
        assert threads == torch.get_num_threads()


def test_small_work_and_other_devices_do_not_read_the_load(monkeypatch):
    def fail():
        raise AssertionError("the load was read")

    monkeypatch.setattr(_threads, "busy_elsewhere", fail)
    with fair_cpu_threads("cpu", elements=1000) as threads:
        assert threads == torch.get_num_threads()
    with fair_cpu_threads("meta"), one_cpu_thread("meta"):
        pass


def test_a_cgroup_quota_caps_the_cores(monkeypatch):
    monkeypatch.setattr(_threads, "_cgroup_quota", lambda: 1.5)
    assert 1 <= available_cores() <= 2
    monkeypatch.setattr(_threads, "_cgroup_quota", lambda: None)
    assert available_cores() >= 1


def test_the_load_reading_is_a_count():
    busy = _threads.busy_elsewhere()
    assert busy is None or busy >= 0


@needs_threads
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_checks_and_masks_run_capped_under_load_with_the_same_results(monkeypatch, dtype):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(256, 512, generator=g).to(dtype)
    free_mask, free_report = make_mask(weight), check_pattern(weight)
    seen = []
    for module, name in ((masks, "_make_mask"), (checks, "_check")):
        inner = getattr(module, name)

        def spy(*args, _inner=inner):
            seen.append(torch.get_num_threads())
            return _inner(*args)

        monkeypatch.setattr(module, name, spy)
    monkeypatch.setattr(_threads, "busy_elsewhere", lambda: 64)
    mask, report = make_mask(weight), check_pattern(weight)
    assert seen == [1, 1]
    assert torch.equal(mask, free_mask) and report == free_report


@needs_threads
def test_steady_threads_read_the_cores_never_the_load(monkeypatch):
    monkeypatch.setattr(_threads, "available_cores", lambda: 2)
    before = torch.get_num_threads()
    for busy in (0, 1, 64):
        monkeypatch.setattr(_threads, "busy_elsewhere", lambda busy=busy: busy)
        with steady_cpu_threads() as threads:
            assert threads == min(before, 2) == torch.get_num_threads()
    assert torch.get_num_threads() == before
