"""``SparseQKV``: an attention block's query, key and value projections as one 2:4 matmul.

The three projections of self-attention read the same input, so their stacked weights
``[Wq; Wk; Wv]`` (and biases, as Qwen2 and BERT have) run as one sparse product: one larger,
more efficient problem and one call instead of three. The attention module itself is left as
it is: its ``q_proj``, ``k_proj`` and ``v_proj`` (``query``, ``key``, ``value`` in BERT) become
:class:`QKVPart` views of the shared product. The first part called with an input computes the
whole product; the other two, called with the same input, take their columns of it. The output
is row-major, so the slices are what attention kernels want (last dimension contiguous).

Under ``torch.compile`` the sharing is traced like any Python, so the compiled graph calls
the custom op of :mod:`explorer.gpu.cuda.ops` once per attention module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from explorer import _html
from explorer.dtypes import dtype_name
from explorer.gpu.modules.sparse_linear import SparseLinear
from explorer.gpu.modules.sparse_options import SparseOptions
from explorer.gpu.modules.sparse_weight import stack_linears

if TYPE_CHECKING:
    from explorer.gpu.modules.int4_linear import Int4Linear

__all__ = ["ATTENTION_PROJECTIONS", "QKVPart", "SparseQKV", "find_qkv"]

#: Names of the (query, key, value) projections in known self-attention modules.
ATTENTION_PROJECTIONS = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"))


def find_qkv(module: nn.Module) -> tuple[str, str, str] | None:
    """The names of ``module``'s query, key and value ``nn.Linear`` children, if it has them.

    Only plain ``nn.Linear`` children with the same input size, dtype and device count, and
    never a cross-attention module (its key and value read another input).

    Parameters
    ----------
    module : torch.nn.Module
        The attention module to look in.

    Returns
    -------
    (str, str, str) or None
        The three children's names, or None.

    Examples
    --------
    >>> class Attn(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.q_proj, self.k_proj, self.v_proj = (nn.Linear(8, 8) for _ in range(3))
    >>> find_qkv(Attn())
    ('q_proj', 'k_proj', 'v_proj')
    >>> find_qkv(nn.Linear(8, 8)) is None
    True
    """
    if getattr(module, "is_cross_attention", False) or "Cross" in type(module).__name__:
        return None
    for names in ATTENTION_PROJECTIONS:
        parts = [getattr(module, n, None) for n in names]
        if not all(type(p) is nn.Linear for p in parts):
            continue
        w = [p.weight for p in parts]
        if len({p.in_features for p in parts}) != 1:
            continue
        if len({t.dtype for t in w}) != 1 or len({t.device for t in w}) != 1:
            continue
        if len({p.bias is None for p in parts}) != 1:
            continue
        return names
    return None


class SparseQKV(nn.Module):
    """The stacked query/key/value projection of one attention module, run once per input.

    Parameters
    ----------
    proj : SparseLinear or Int4Linear
        The stacked ``[Wq; Wk; Wv]`` layer (row-major output): 2:4 in 16 bits, or 2:4 with int4
        kept values (``sparsify(model, dtype="int4")``).
    sizes : tuple of int
        Output features of the query, key and value projections.

    Examples
    --------
    >>> import explorer
    >>> attn = nn.ModuleList([nn.Linear(256, n, bias=False) for n in (256, 128, 128)])
    >>> _ = explorer.prune(attn, progress=False)
    >>> q_proj, k_proj, v_proj = attn.half().cuda()  # doctest: +GPU
    >>> q, k, v = SparseQKV.from_modules(q_proj, k_proj, v_proj).parts()
    >>> x = torch.randn(16, 256, dtype=torch.half, device="cuda")
    >>> torch.allclose(k(x), k_proj(x), rtol=1e-2, atol=1e-1), tuple(v(x).shape)
    (True, (16, 128))
    """

    def __init__(self, proj: SparseLinear | Int4Linear, sizes: tuple[int, int, int]) -> None:
        super().__init__()
        if sum(sizes) != proj.out_features:
            raise ValueError(
                f"sizes {sizes} add up to {sum(sizes)}, but the stacked projection has "
                f"{proj.out_features} outputs"
            )
        if proj.output != "rows":
            raise ValueError("the stacked projection must return row-major outputs")
        self.proj = proj
        self.sizes = tuple(int(s) for s in sizes)
        self._memo: tuple | None = None  # (input, its version, output, parts still to serve)

    def __setstate__(self, state: dict) -> None:
        """A copy starts with nothing in memory."""
        super().__setstate__(state)
        self._memo = None

    @classmethod
    def from_modules(
        cls,
        q: nn.Linear,
        k: nn.Linear,
        v: nn.Linear,
        options: SparseOptions | None = None,
        *,
        backend: str = "cusparselt",
        **option_fields,
    ) -> SparseQKV:
        """Compress three 2:4 CUDA ``nn.Linear`` projections that read the same input.

        Parameters
        ----------
        q, k, v : nn.Linear
            The same ``in_features``, dtype, device and bias presence.
        options, backend, **option_fields
            As for :meth:`SparseLinear.from_linear` (the stacked product's output is always
            row-major, whatever ``options.output`` says: the three parts are views of it).

        Raises
        ------
        ValueError
            Inputs that differ, or any of the reasons of ``from_linear``.
        """
        parts = (q, k, v)
        stacked = stack_linears(*parts)
        options = (options or SparseOptions()).replace(**{**option_fields, "output": "rows"})
        proj = SparseLinear.from_linear(stacked, options, backend=backend)
        return cls(proj, tuple(p.out_features for p in parts))

    def parts(self) -> tuple[QKVPart, QKVPart, QKVPart]:
        """Three modules that replace the query, key and value projections."""
        return tuple(QKVPart(self, i) for i in range(len(self.sizes)))

    def shared(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The q, k and v views of the stacked product for ``x``.

        Computed once for the three parts that ask for it.

        The memory lasts until the three parts have been served (or another input comes), and
        an input changed in place is computed again. Under ``torch.compile`` the same logic is
        traced, so the graph holds one product, and nothing is left in memory after it.

        Parameters
        ----------
        x : torch.Tensor
            The attention's input.

        Returns
        -------
        tuple of torch.Tensor
            The q, k and v views.
        """
        compiling = torch.compiler.is_compiling()
        version = 0 if compiling else x._version
        memo = self._memo
        if memo is not None and memo[0] is x and memo[1] == version:
            views, left = memo[2], memo[3] - 1
            self._memo = (x, version, views, left) if left else None
            return views
        # one call for the three views (the eager call directly: host time per step)
        y = self.proj(x) if compiling else self.proj.run(x)
        views = y.split(self.sizes, dim=-1)
        self._memo = (x, version, views, len(self.sizes) - 1)
        return views

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The stacked ``[q, k, v]`` output for ``x[..., in]`` (row-major)."""
        return self.proj(x)

    def set_mode(self, mode: str) -> None:
        """Choose the stacked product's routes for execution mode ``mode``.

        See ``SparseLinear``.

        Parameters
        ----------
        mode : {"auto", "eager", "compile", "graphs"}
            The execution mode.
        """
        self.proj.set_mode(mode)

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        q, k, v = self.sizes
        return f"q={q}, k={k}, v={v}, in_features={self.proj.in_features}, one 2:4 matmul"

    def _repr_html_(self) -> str:
        rows = [
            ("q / k / v outputs", " / ".join(map(str, self.sizes))),
            ("stacked", f"{self.proj.out_features} x {self.proj.in_features}"),
            ("dtype", dtype_name(self.proj.dtype)),
            ("bias", self.proj.bias is not None),
        ]
        return _html.table(["SparseQKV", ""], rows)


class QKVPart(nn.Module):
    """Output ``index`` (0: query, 1: key, 2: value) of a :class:`SparseQKV` product.

    The shared block is held without registering it as a child, so it is saved and moved once,
    with the attention module that owns it.
    """

    def __init__(self, owner: SparseQKV, index: int) -> None:
        super().__init__()
        object.__setattr__(self, "owner", owner)
        self.index = int(index)
        self.start = sum(owner.sizes[:index])
        self.stop = self.start + owner.sizes[index]
        self.in_features = owner.proj.in_features
        self.out_features = self.stop - self.start

    @property
    def weight_shape(self) -> tuple[int, int]:
        """``(out_features, in_features)`` of the projection this part replaced."""
        return self.out_features, self.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The projection's output for ``x[..., in]``: a view of the shared row-major product."""
        return self.owner.shared(x)[self.index]

    def extra_repr(self) -> str:
        """The text shown inside the module's repr."""
        return f"columns {self.start}:{self.stop} of a fused q/k/v 2:4 matmul"
