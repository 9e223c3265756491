"""Target GPUs for the doctor: a name and a compute capability, with or without a GPU present."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from . import sparse_rules

__all__ = ["KNOWN_CAPABILITIES", "KNOWN_GPUS", "DeviceTarget"]

# Compute capabilities of common data-centre and workstation GPUs.
KNOWN_GPUS: dict[str, tuple[int, int]] = {
    "V100": (7, 0),
    "T4": (7, 5),
    "A100": (8, 0),
    "A30": (8, 0),
    "A10": (8, 6),
    "A40": (8, 6),
    "RTX 3090": (8, 6),
    "L4": (8, 9),
    "L40S": (8, 9),
    "RTX 4090": (8, 9),
    "H100": (9, 0),
    "H200": (9, 0),
    "GH200": (9, 0),
    "B200": (10, 0),
    "RTX 5090": (12, 0),
}

#: Every compute capability NVIDIA has shipped (Kepler 3.0 to Blackwell 12.1), as (major, minor).
KNOWN_CAPABILITIES: tuple[tuple[int, int], ...] = (
    (3, 0), (3, 2), (3, 5), (3, 7),
    (5, 0), (5, 2), (5, 3),
    (6, 0), (6, 1), (6, 2),
    (7, 0), (7, 2), (7, 5),
    (8, 0), (8, 6), (8, 7), (8, 9),
    (9, 0),
    (10, 0), (10, 1), (10, 3),
    (11, 0),
    (12, 0), (12, 1),
)  # fmt: skip

# ASCII digits only (int() would also read full-width ones); sm_90a and sm_100f name their base.
_CAPABILITY = re.compile(
    r"^\s*(?:sm_?|cc|compute_?)?\s*([0-9]+)(?:[._]([0-9]))?[af]?\s*$", re.IGNORECASE | re.ASCII
)


def _known(device: object, capability: tuple[int, int]) -> tuple[int, int]:
    """``capability`` if some NVIDIA GPU has it, else a ValueError listing those that exist."""
    if capability not in KNOWN_CAPABILITIES:
        major, minor = capability
        known = ", ".join(f"{a}.{b}" for a, b in KNOWN_CAPABILITIES)
        raise ValueError(
            f"device={device!r} means compute capability {major}.{minor}, which no NVIDIA GPU "
            f"has; expected one of {known} (8.0 for an A100, 9.0 for an H100, 10.0 for a B200), "
            f"or a GPU name such as {', '.join(list(KNOWN_GPUS)[:4])}"
        )
    return capability


@dataclass(frozen=True)
class DeviceTarget:
    """The GPU a model is meant to run on.

    Parameters
    ----------
    name : str
        A readable name, e.g. ``"H100"``.
    capability : tuple of int
        Compute capability ``(major, minor)``; ``(0, 0)`` for a CPU.

    Examples
    --------
    >>> DeviceTarget.resolve("H100")
    DeviceTarget('H100', sm_90)
    >>> DeviceTarget.resolve("8.6").supports_24
    True
    >>> DeviceTarget.resolve("sm_75").supports_24
    False
    """

    name: str
    capability: tuple[int, int]

    @classmethod
    def resolve(cls, device: object = None) -> DeviceTarget:
        """Build a target from a name, a capability, a ``torch.device`` or the current GPU.

        Parameters
        ----------
        device : None, str, tuple, torch.device or DeviceTarget
            None uses the current CUDA GPU, or an H100 when there is none (say which GPU you
            target to get advice for it). Strings may be GPU names (``"A100"``), capabilities
            (``"9.0"``, ``"sm_90"``, ``"90"``) or device strings (``"cuda:0"``, ``"cpu"``).

        Raises
        ------
        ValueError
            For a name or capability that cannot be understood, or a capability no NVIDIA GPU
            has (see :data:`KNOWN_CAPABILITIES`). A GPU that is present is taken as it reports
            itself.
        """
        if isinstance(device, DeviceTarget):
            return device
        if device is None:
            if torch.cuda.is_available():
                return cls._from_cuda(torch.device("cuda", torch.cuda.current_device()))
            return cls("H100 (assumed: no GPU here)", (9, 0))
        if isinstance(device, torch.device):
            return cls._from_torch(device)
        if (
            isinstance(device, tuple)
            and len(device) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in device)
        ):
            major, minor = _known(device, (int(device[0]), int(device[1])))
            return cls(f"sm_{major}{minor}", (major, minor))
        if isinstance(device, str):
            text = device.strip()
            if text.lower() == "cpu" or text.lower().startswith("cuda"):
                return cls._from_torch(torch.device(text))
            for name, capability in KNOWN_GPUS.items():
                if text.upper().replace("NVIDIA ", "").startswith(name.upper()):
                    return cls(name, capability)
            if match := _CAPABILITY.match(text):
                major, minor = match.group(1), match.group(2)
                if minor is None and len(major) >= 2:
                    major, minor = major[:-1], major[-1]
                major, minor = _known(device, (int(major), int(minor or 0)))
                return cls(f"sm_{major}{minor}", (major, minor))
        raise ValueError(
            f"cannot tell which GPU {device!r} is; pass a GPU name ({', '.join(KNOWN_GPUS)}), "
            f'a compute capability such as "9.0" or (8, 0), or a torch.device'
        )

    @classmethod
    def _from_torch(cls, device: torch.device) -> DeviceTarget:
        if device.type == "cpu":
            return cls("CPU", (0, 0))
        if device.type != "cuda":
            raise ValueError(f"device {device} is not a CUDA GPU; 2:4 sparse matmuls need one")
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device} was asked for but CUDA is not available here; "
                f'pass the target instead, e.g. device="H100" or device="8.0"'
            )
        return cls._from_cuda(device)

    @classmethod
    def _from_cuda(cls, device: torch.device) -> DeviceTarget:
        index = device.index if device.index is not None else torch.cuda.current_device()
        return cls(torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index))

    @property
    def is_gpu(self) -> bool:
        """Whether the target is a GPU (a CPU has capability ``(0, 0)``)."""
        return self.capability != (0, 0)

    @property
    def supports_24(self) -> bool:
        """Sparse tensor cores: :data:`explorer.sparse_rules.MIN_CAPABILITY` (8.0) or newer."""
        return self.capability >= sparse_rules.MIN_CAPABILITY

    @property
    def supports_fp8(self) -> bool:
        """fp8 2:4 matmuls: :data:`explorer.sparse_rules.FP8_MIN_CAPABILITY` (8.9) or newer."""
        return self.capability >= sparse_rules.min_capability(torch.float8_e4m3fn)

    @property
    def is_hopper(self) -> bool:
        """Whether the target is a Hopper GPU (compute capability 9.x)."""
        return self.capability[0] == 9

    @property
    def sm(self) -> str:
        """The compute capability as an architecture name, e.g. ``"sm_90"``."""
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def __repr__(self) -> str:
        return f"DeviceTarget({self.name!r}, {self.sm})"
