"""Canonical JSON and configuration keys: property tests."""

from __future__ import annotations

import json
import random

from hypothesis import given
from hypothesis import strategies as st

from explorer.results.store import canonical_json, config_key, to_jsonable

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


def _shuffled(value, rng):
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@given(st.dictionaries(st.text(), values, max_size=6), st.integers(0, 2**16))
def test_key_ignores_dict_order(config, seed):
    assert config_key(config) == config_key(_shuffled(config, random.Random(seed)))


@given(st.dictionaries(st.text(), values, max_size=6))
def test_canonical_json_round_trips(config):
    assert json.loads(canonical_json(config)) == to_jsonable(config)


def test_non_finite_floats_become_null():
    assert canonical_json({"a": float("nan"), "b": float("-inf")}) == '{"a":null,"b":null}'
