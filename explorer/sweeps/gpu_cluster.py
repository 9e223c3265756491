"""``sweep --gpus``: which GPUs to use, and a local Dask cluster with one worker per GPU.

:func:`parse_gpus` is the pure part: the ``--gpus`` value and the device count give the device
indices. :func:`start_gpu_cluster` starts one single-threaded Dask worker per device, pinned to
it through ``CUDA_VISIBLE_DEVICES`` and advertising the resource ``GPU=1`` (so a cell that asks
for ``GPU=1`` holds that worker's GPU alone; :mod:`explorer.sweeps.routing`): dask-cuda's
``LocalCUDACluster`` where it is installed, else a ``distributed.SpecCluster`` of ``Nanny``
workers, each started with its own ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "close_gpu_cluster",
    "cuda_device_count",
    "parse_gpus",
    "start_gpu_cluster",
    "worker_specs",
]


def parse_gpus(value: str, count: int) -> list[int]:
    """The device indices ``--gpus`` names: ``"all"``, a count ``"N"`` or a list ``"0,2,5"``.

    Parameters
    ----------
    value : str
        ``"all"`` (every device), ``"N"`` (the first N devices) or comma-separated indices
        (``"0,2,5"``; a single index is written with a trailing comma, ``"3,"``).
    count : int
        CUDA devices on this machine.

    Returns
    -------
    list of int
        Distinct device indices, in the order given.

    Raises
    ------
    ValueError
        No CUDA GPU here, a malformed value, a count of zero or beyond ``count``, an index
        beyond the devices, or a repeated index; the message names the value and the fix.

    Examples
    --------
    >>> parse_gpus("all", 4), parse_gpus("2", 4), parse_gpus("0,2", 4), parse_gpus("3,", 4)
    ([0, 1, 2, 3], [0, 1], [0, 2], [3])
    >>> parse_gpus("all", 0)
    Traceback (most recent call last):
    ...
    ValueError: --gpus all: this machine has no CUDA GPU (torch sees 0 devices); run the sweep on a GPU machine, or leave --gpus out (--workers N runs cells in CPU processes)
    """
    text = str(value).strip().lower()
    if count < 1:
        raise ValueError(
            f"--gpus {value}: this machine has no CUDA GPU (torch sees 0 devices); run the "
            "sweep on a GPU machine, or leave --gpus out (--workers N runs cells in CPU processes)"
        )
    have = f"this machine has {count} CUDA device{'s' if count != 1 else ''} (0-{count - 1})"
    if text == "all":
        return list(range(count))
    if "," not in text:
        if not text.isdigit() or int(text) < 1:
            raise ValueError(
                f"--gpus {value!r}: expected 'all', a number of GPUs (at least 1) or device "
                "indices such as 0,2,5 (one index: '3,')"
            )
        if int(text) > count:
            raise ValueError(f"--gpus {value}: asks for {int(text)} GPUs but {have}")
        return list(range(int(text)))
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(
            f"--gpus {value!r}: expected device indices separated by commas, such as 0,2,5"
        )
    indices = [int(p) for p in parts]
    beyond = [i for i in indices if i >= count]
    if beyond:
        raise ValueError(f"--gpus {value}: device {beyond[0]} does not exist: {have}")
    if len(set(indices)) != len(indices):
        raise ValueError(f"--gpus {value}: a device is named twice; name each once")
    return indices


def cuda_device_count() -> int:
    """CUDA devices torch sees here (0 without CUDA).

    Examples
    --------
    >>> cuda_device_count() >= 0
    True
    """
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def worker_specs(
    devices: Sequence[int], local_directory: str | Path | None = None
) -> dict[str, dict]:
    """``SpecCluster`` worker specs: one single-threaded ``Nanny`` per device, pinned to it.

    Each worker sees only its device (``CUDA_VISIBLE_DEVICES``), so it is ``cuda:0`` there,
    and advertises ``GPU=1``.

    Parameters
    ----------
    devices : Sequence[int]
        The CUDA device indices, one worker each.
    local_directory : str or pathlib.Path or None, optional
        The workers' scratch folder.

    Returns
    -------
    dict[str, dict]
        Specs by worker name (``gpu-<index>``).

    Examples
    --------
    >>> spec = worker_specs([2])
    >>> spec["gpu-2"]["options"]["env"], spec["gpu-2"]["options"]["resources"]
    ({'CUDA_VISIBLE_DEVICES': '2'}, {'GPU': 1})
    """
    from distributed import Nanny

    options: dict[str, Any] = {"nthreads": 1, "resources": {"GPU": 1}}
    if local_directory is not None:
        options["local_directory"] = str(local_directory)
    return {
        f"gpu-{i}": {
            "cls": Nanny,
            "options": {**options, "env": {"CUDA_VISIBLE_DEVICES": str(i)}, "name": f"gpu-{i}"},
        }
        for i in devices
    }


def start_gpu_cluster(devices: Sequence[int], local_directory: str | Path | None = None) -> Any:
    """Start a local Dask cluster with one worker per device in ``devices``; return its client.

    Close both with :func:`close_gpu_cluster`. Worker scratch files go to
    ``local_directory`` (default: Dask's own, ``dask-scratch-space`` in the temporary folder).

    Parameters
    ----------
    devices : sequence of int
        Device indices, as :func:`parse_gpus` returns them.
    local_directory : path, optional
        The workers' scratch folder.

    Returns
    -------
    distributed.Client
        Connected to the cluster; ``client.cluster`` is the cluster.

    Examples
    --------
    On a CPU machine the workers start all the same (``CUDA_VISIBLE_DEVICES`` pins nothing):

    >>> import tempfile  # doctest: +SKIP
    >>> client = start_gpu_cluster([0], tempfile.mkdtemp())  # doctest: +SKIP
    >>> client.submit(lambda: 1, resources={"GPU": 1}).result()  # doctest: +SKIP
    1
    >>> close_gpu_cluster(client)  # doctest: +SKIP
    """
    from explorer.errors import require

    distributed = require("distributed", "distributed")
    # 1. dask-cuda knows GPU workers best (CPU affinity, memory limits): use it where installed.
    if importlib.util.find_spec("dask_cuda") is not None:
        from dask_cuda import LocalCUDACluster

        options: dict[str, Any] = {"dashboard_address": None}
        if local_directory is not None:
            options["local_directory"] = str(local_directory)
        cluster = LocalCUDACluster(
            CUDA_VISIBLE_DEVICES=list(devices),
            threads_per_worker=1,
            resources={"GPU": 1},
            **options,
        )
    else:
        # 2. Else one Nanny per device, each started with its own CUDA_VISIBLE_DEVICES.
        cluster = distributed.SpecCluster(
            workers=worker_specs(devices, local_directory),
            scheduler={
                "cls": distributed.Scheduler,
                "options": {"dashboard_address": None},
            },
            silence_logs=logging.WARNING,
        )
    try:
        client = distributed.Client(cluster, set_as_default=False)
    except BaseException:
        cluster.close()
        raise
    client.wait_for_workers(len(devices))
    return client


def close_gpu_cluster(client: Any) -> None:
    """Close a client of :func:`start_gpu_cluster` and its cluster.

    Parameters
    ----------
    client : Any
        The client, or None (nothing to close).

    Examples
    --------
    >>> close_gpu_cluster(None)
    """
    if client is None:
        return
    cluster = getattr(client, "cluster", None)
    try:
        client.close()
    finally:
        if cluster is not None:
            cluster.close()
