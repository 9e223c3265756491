"""Where and with what a measurement was made: attached to every row of the results store.

The machine part (GPU, driver, CUDA, torch, cuSPARSELt, explorer, Python, platform) is
collected once per process and cached; the time is taken afresh for every call. The GPU is the
process's first visible device: a worker of ``sweep --gpus`` sees only its own, so its rows
name that GPU's kind, its index on the machine and its UUID.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone

__all__ = ["cusparselt_text", "explorer_version", "machine", "physical_index", "provenance"]


def explorer_version() -> str:
    """The installed sparsity-explorer version, or the package's ``__version__``.

    Examples
    --------
    >>> import explorer
    >>> explorer_version() == explorer.__version__
    True
    """
    try:
        return importlib.metadata.version("sparsity-explorer")
    except importlib.metadata.PackageNotFoundError:
        module = sys.modules.get("explorer")
        return str(getattr(module, "__version__", "unknown"))


def _driver_version() -> str | None:
    # The NVIDIA driver release (e.g. "570.124.06"), read from nvidia-smi when present.
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def cusparselt_text(raw: object) -> str | None:
    """The cuSPARSELt version as text, from torch's integer such as 800 (0.8.0) or 602 (0.6.2).

    Parameters
    ----------
    raw : int, str or None
        The version as torch reports it; text is returned as it is.

    Returns
    -------
    str or None

    Examples
    --------
    >>> cusparselt_text(800), cusparselt_text(602), cusparselt_text("0.8.0"), cusparselt_text(None)
    ('0.8.0', '0.6.2', '0.8.0', None)
    """
    if raw is None or isinstance(raw, str):
        return raw
    raw = int(raw)
    return f"{raw // 1000 if raw >= 1000 else 0}.{raw // 100 % 10}.{raw % 100}"


def _cusparselt_version(torch) -> str | None:
    try:
        raw = torch.backends.cusparselt.version()
    except (AttributeError, RuntimeError):
        return None
    return cusparselt_text(raw)


def physical_index(visible: str | None) -> int | None:
    """The machine's index of the first visible CUDA device, from ``CUDA_VISIBLE_DEVICES``.

    Unset, the first visible device is device 0; a UUID or MIG entry gives None (the index is
    then looked up from the UUID where NVML can).

    Parameters
    ----------
    visible : str or None
        The value of ``CUDA_VISIBLE_DEVICES``, or None when unset.

    Returns
    -------
    int or None

    Examples
    --------
    >>> physical_index(None), physical_index("3,0,1"), physical_index("GPU-8f1c"), physical_index("")
    (0, 3, None, None)
    """
    if visible is None:
        return 0
    first = visible.split(",")[0].strip()
    return int(first) if first.isdigit() else None


def _uuid(torch) -> str | None:
    # The first visible device's UUID, as nvidia-smi writes it ("GPU-...").
    try:
        raw = str(torch.cuda.get_device_properties(0).uuid)
    except (AttributeError, RuntimeError):
        return None
    return raw if raw.startswith(("GPU-", "MIG-")) else f"GPU-{raw}"


def _index_from_uuid(uuid: str | None) -> int | None:
    # NVML's index of the device with this UUID, when pynvml is installed.
    if uuid is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, or it does not know the device: the index stays unknown
        return None


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """The machine part of the provenance, collected once per process.

    Returns
    -------
    dict
        Keys ``gpu`` (the device name, or ``"cpu"`` without a CUDA GPU), ``gpu_capability``
        (``"9.0"``), ``gpu_index`` (the device's index on the machine) and ``gpu_uuid`` (both
        ``None`` without a CUDA GPU), ``gpu_count``, ``driver``, ``cuda``, ``torch``, ``cusparselt``,
        ``explorer``, ``python``, ``platform`` and ``cpu``; unknown values are ``None``.

    Examples
    --------
    >>> sorted(machine())[:3]
    ['cpu', 'cuda', 'cusparselt']
    """
    info: dict = {
        "gpu": "cpu",
        "gpu_capability": None,
        "gpu_index": None,
        "gpu_uuid": None,
        "gpu_count": 0,
        "driver": None,
        "cuda": None,
        "torch": None,
        "cusparselt": None,
        "explorer": explorer_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        import torch
    except ImportError:
        return info
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_capability"] = f"{major}.{minor}"
        info["gpu_count"] = torch.cuda.device_count()
        info["gpu_uuid"] = _uuid(torch)
        index = physical_index(os.environ.get("CUDA_VISIBLE_DEVICES"))
        info["gpu_index"] = index if index is not None else _index_from_uuid(info["gpu_uuid"])
        info["driver"] = _driver_version()
        info["cusparselt"] = _cusparselt_version(torch)
    return info


def provenance() -> dict:
    """The machine's provenance plus the current UTC time (ISO 8601, key ``time``).

    Examples
    --------
    >>> p = provenance()
    >>> p["time"].endswith("+00:00") and "torch" in p
    True
    """
    return {**machine(), "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
