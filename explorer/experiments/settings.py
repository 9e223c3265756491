"""The experiments' settings per model, and the facts of the machine a run is measured on."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

import torch

from explorer.results.store.provenance import provenance

__all__ = ["DEFAULTS", "RECOVERY", "model_settings", "run_facts"]

#: Per-model settings of the full runs: loader options, calibration samples, fine-tuning.
DEFAULTS: dict[str, dict[str, Any]] = {
    "digits-mlp": {"load": {}, "calibration": 512, "finetune": {"steps": 100, "lr": 1e-3}},
    "fashion-mlp": {"load": {}, "calibration": 1024, "finetune": {"steps": 100, "lr": 1e-3}},
    "minilm": {"load": {"n_eval": 300}, "calibration": 256, "finetune": None},
    "smollm2": {"load": {"n_eval": 16, "seq_len": 256}, "calibration": 16, "finetune": None},
}

#: Masked distillation after pruning (``--recovery-minutes``): training inputs and optimiser.
RECOVERY: dict[str, dict[str, Any]] = {
    "minilm": {"samples": 1024, "seed": 1, "lr": 1e-4, "train": "masked"},
    "smollm2": {"samples": 512, "seed": 1, "lr": 1e-4, "train": "masked"},
}


def model_settings(
    name: str, overrides: dict[str, Any] | None = None, recovery_minutes: float | None = None
) -> dict[str, Any]:
    """One model's settings: :data:`DEFAULTS`, its :data:`RECOVERY` if asked, then overrides.

    Parameters
    ----------
    name : str
        The model's name.
    overrides : dict, optional
        Settings that replace the defaults' (top-level keys).
    recovery_minutes : float, optional
        When given and the model has :data:`RECOVERY` settings, adds them under ``"recovery"``
        with this many minutes.

    Returns
    -------
    dict
        The merged settings (a new dict).

    Examples
    --------
    >>> model_settings("smollm2", {"calibration": 4}, recovery_minutes=2)["recovery"]["minutes"]
    2
    >>> model_settings("smollm2", {"calibration": 4})["calibration"]
    4
    """
    merged = {**DEFAULTS.get(name, {"load": {}, "calibration": 128, "finetune": None})}
    if recovery_minutes and name in RECOVERY:
        merged["recovery"] = {**RECOVERY[name], "minutes": recovery_minutes}
    merged.update(overrides or {})
    return merged


def run_facts() -> dict[str, Any]:
    """Where a CPU run happens: the store's provenance plus the CPU's model, cores and threads.

    Examples
    --------
    >>> facts = run_facts()
    >>> facts["device"], facts["torch"] == torch.__version__, facts["date"].endswith("UTC")
    ('cpu', True, True)
    """
    here = provenance()
    cpu = here["cpu"]
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    try:
        transformers = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        transformers = "not installed"
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "date": here["time"][:16].replace("T", " ") + " UTC",
        "cpu": cpu,
        "cores": len(affinity(0)) if affinity else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": here["platform"],
        "python": here["python"],
        "torch": here["torch"],
        "transformers": transformers,
        "device": "cpu",
    }
