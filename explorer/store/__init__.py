"""The results store: every measurement in an SQLite file, with provenance on every row.

Examples
--------
>>> from explorer.store import ResultStore
>>> store = ResultStore(":memory:")
>>> store.record("dense", {"model": "digits-mlp", "dtype": "float32"}, {"accuracy": 0.97})
1
>>> store.query(model="digits-mlp")
ResultTable(1 rows: dense=1, failed=0)

Every row's provenance comes from :func:`explorer.store.provenance.provenance`. A damaged file
is never written to: :func:`check_store` says what is wrong and :func:`recover_store` copies
every readable row into a new file.
"""

from explorer.store.canonical import canonical_json, config_key, to_jsonable
from explorer.store.db import ResultStore
from explorer.store.location import StoreError, default_path, reference_path
from explorer.store.provenance import explorer_version, machine
from explorer.store.repair import RecoveryResult, StoreHealth, check_store, recover_store
from explorer.store.schema import SCHEMA_VERSION
from explorer.store.table import ResultTable, Row

__all__ = [
    "SCHEMA_VERSION",
    "RecoveryResult",
    "ResultStore",
    "ResultTable",
    "Row",
    "StoreError",
    "StoreHealth",
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
