"""The results store: every measurement in an SQLite file, with provenance on every row.

Examples
--------
>>> from explorer.results.store import ResultStore
>>> store = ResultStore(":memory:")
>>> store.record("dense", {"model": "digits-mlp", "dtype": "float32"}, {"accuracy": 0.97})
1
>>> store.query(model="digits-mlp")
ResultTable(1 rows: dense=1, failed=0)

Every row's provenance comes from :func:`explorer.results.store.provenance.provenance`. A damaged file
is never written to: :func:`check_store` says what is wrong and :func:`recover_store` copies
every readable row into a new file.
"""

from explorer.results.store.canonical import canonical_json, config_key, to_jsonable
from explorer.results.store.db import ResultStore
from explorer.results.store.location import StoreError, cache_dir, default_path, reference_path
from explorer.results.store.provenance import explorer_version, machine
from explorer.results.store.repair import RecoveryResult, StoreHealth, check_store, recover_store
from explorer.results.store.schema import SCHEMA_VERSION
from explorer.results.store.table import ResultTable, Row

__all__ = [
    "SCHEMA_VERSION",
    "RecoveryResult",
    "ResultStore",
    "ResultTable",
    "Row",
    "StoreError",
    "StoreHealth",
    "cache_dir",
    "canonical_json",
    "check_store",
    "config_key",
    "default_path",
    "explorer_version",
    "machine",
    "recover_store",
    "reference_path",
    "to_jsonable",
]
