"""A copy of a model's parameters, buffers and gradients that can be put back bit for bit.

Operations that change a model in place (fine-tuning, the dashboard's pruning runs) take a
:class:`Snapshot` first, so a run that fails, diverges or is cancelled leaves the model exactly
as it was.

Examples
--------
>>> import torch
>>> from torch import nn
>>> net = nn.Sequential(nn.Linear(8, 2), nn.BatchNorm1d(2))
>>> before = [t.clone() for t in net.state_dict().values()]
>>> snap = Snapshot(net)
>>> with torch.no_grad():
...     _ = net[0].weight.fill_(float("nan"))
>>> _ = net.train()(torch.randn(4, 8))  # moves the batch-norm statistics
>>> snap.restore()
>>> all(torch.equal(a, b) for a, b in zip(before, net.state_dict().values()))
True
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Snapshot"]


class Snapshot:
    """A copy of every parameter, buffer and gradient of a module, put back bit for bit.

    Parameters and buffers are remembered by the module and name that hold them, so a forward
    pass that replaces a buffer (rather than writing into it) is undone too.

    Parameters
    ----------
    model : nn.Module
        The module to copy (on the devices its tensors are on).
    """

    def __init__(self, model: nn.Module) -> None:
        self._saved: list[tuple[nn.Module, str, torch.Tensor, torch.Tensor]] = []
        self._grads: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        seen: set[int] = set()
        with torch.no_grad():
            for module in model.modules():
                own = [
                    *module.named_parameters(recurse=False),
                    *module.named_buffers(recurse=False),
                ]
                for name, tensor in own:
                    self._saved.append((module, name, tensor, tensor.detach().clone()))
                    if isinstance(tensor, nn.Parameter) and id(tensor) not in seen:
                        seen.add(id(tensor))
                        grad = tensor.grad
                        self._grads.append((tensor, None if grad is None else grad.clone()))

    def restore(self) -> None:
        """Put every parameter, buffer and gradient back as it was when the snapshot was taken."""
        with torch.no_grad():
            for module, name, tensor, copy in self._saved:
                tensor.copy_(copy)
                if getattr(module, name, None) is not tensor:
                    setattr(module, name, tensor)
            for param, grad in self._grads:
                param.grad = grad
