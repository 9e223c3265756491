"""Finding the layers whose input channels can be reordered for free, and their producers.

See :mod:`explorer.pruning.permute` for why these structures are free: gated, BERT-style and
``nn.Sequential`` MLPs, and attention output projections within heads (grouped-query heads
sharing a value head share one order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

__all__ = ["ELEMENTWISE", "ChannelGroup", "find_producers"]


#: Modules that act on each channel alone, so a channel order passes through them unchanged.
ELEMENTWISE = (
    nn.ReLU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.LeakyReLU,
    nn.ELU,
    nn.Mish,
    nn.Hardswish,
    nn.ReLU6,
    nn.Softplus,
    nn.Dropout,
    nn.Identity,
)


@dataclass
class ChannelGroup:
    """Channels of one consumer that may be reordered, and how the producers follow.

    ``segments`` lists, for each independent order, ``(length, consumer column offsets,
    producer row offsets)``: the same order of ``length`` channels is applied at every listed
    offset (several offsets when grouped-query heads share one value head).
    """

    consumer: str
    producers: tuple[str, ...]
    kind: str
    segments: list[tuple[int, list[int], list[int]]] = field(default_factory=list)


def _linear(parent: nn.Module, path: str) -> nn.Linear | None:
    try:
        mod = parent.get_submodule(path)
    except AttributeError:
        return None
    return mod if isinstance(mod, nn.Linear) else None


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _heads(parent: nn.Module, width_in: int, width_v: int) -> tuple[int, int, int] | None:
    """(query heads, value heads, head dim) of an attention module, from its attributes."""
    config = getattr(parent, "config", None)
    n_heads = getattr(parent, "num_attention_heads", None) or getattr(
        config, "num_attention_heads", None
    )
    n_kv = getattr(parent, "num_key_value_heads", None) or getattr(
        config, "num_key_value_heads", None
    )
    head_dim = getattr(parent, "head_dim", None) or getattr(parent, "attention_head_size", None)
    if not n_heads:
        return None
    n_kv = n_kv or n_heads
    head_dim = head_dim or width_in // n_heads
    if n_heads * head_dim != width_in or n_kv * head_dim != width_v or n_heads % n_kv:
        return None
    return int(n_heads), int(n_kv), int(head_dim)


def _attention_group(
    consumer: str, producer: str, heads: tuple[int, int, int], kind: str
) -> ChannelGroup:
    n_heads, n_kv, d = heads
    per_kv = n_heads // n_kv
    segments = [(d, [(g * per_kv + j) * d for j in range(per_kv)], [g * d]) for g in range(n_kv)]
    return ChannelGroup(consumer, (producer,), kind, segments)


def find_producers(model: nn.Module) -> tuple[dict[str, ChannelGroup], dict[str, str]]:
    """Every Linear whose input channels can be reordered for free, with its producers.

    Parameters
    ----------
    model : torch.nn.Module
        The model to search.

    Returns
    -------
    tuple of dict
        ``(groups, notes)``: groups by consumer name, and for attention or MLP modules that
        look permutable but are not (unknown head count, shapes that disagree), why not.

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> groups, notes = find_producers(net)
    >>> list(groups), groups["2"].producers
    (['2'], ('0',))
    """
    groups: dict[str, ChannelGroup] = {}
    notes: dict[str, str] = {}
    for prefix, parent in model.named_modules():
        gate, up, down = (_linear(parent, n) for n in ("gate_proj", "up_proj", "down_proj"))
        if gate is not None and up is not None and down is not None:
            name = _join(prefix, "down_proj")
            if gate.out_features == up.out_features == down.in_features:
                width = down.in_features
                groups[name] = ChannelGroup(
                    name,
                    (_join(prefix, "gate_proj"), _join(prefix, "up_proj")),
                    "gated MLP",
                    [(width, [0], [0])],
                )
            else:
                notes[name] = "gate_proj, up_proj and down_proj widths disagree"
        for v_path, o_path, kind in (
            ("v_proj", "o_proj", "attention heads"),
            ("self.value", "output.dense", "attention heads (BERT)"),
        ):
            value, out = _linear(parent, v_path), _linear(parent, o_path)
            if value is None or out is None:
                continue
            name = _join(prefix, o_path)
            holder = parent.get_submodule(v_path.rsplit(".", 1)[0]) if "." in v_path else parent
            heads = _heads(holder, out.in_features, value.out_features)
            if heads is None:
                notes[name] = (
                    f"cannot tell the attention heads of {prefix or 'the model'!r} "
                    f"(no num_attention_heads/head_dim matching widths {out.in_features} and "
                    f"{value.out_features})"
                )
                continue
            groups[name] = _attention_group(name, _join(prefix, v_path), heads, kind)
        inter, output = _linear(parent, "intermediate.dense"), _linear(parent, "output.dense")
        if inter is not None and output is not None and hasattr(parent, "attention"):
            name = _join(prefix, "output.dense")
            if inter.out_features == output.in_features:
                groups[name] = ChannelGroup(
                    name,
                    (_join(prefix, "intermediate.dense"),),
                    "BERT-style MLP",
                    [(output.in_features, [0], [0])],
                )
        if isinstance(parent, nn.Sequential):
            _sequential(prefix, parent, groups)
    return groups, notes


def _sequential(prefix: str, seq: nn.Sequential, groups: dict[str, ChannelGroup]) -> None:
    children = list(seq.named_children())
    for i, (name, mod) in enumerate(children):
        if not isinstance(mod, nn.Linear):
            continue
        j = i - 1
        while j >= 0 and isinstance(children[j][1], ELEMENTWISE):
            j -= 1
        if j < 0 or not isinstance(children[j][1], nn.Linear):
            continue
        producer = children[j][1]
        if producer.out_features == mod.in_features:
            consumer = _join(prefix, name)
            groups[consumer] = ChannelGroup(
                consumer,
                (_join(prefix, children[j][0]),),
                "sequential MLP",
                [(mod.in_features, [0], [0])],
            )
