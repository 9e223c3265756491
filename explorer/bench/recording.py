"""Benchmark rows into a results store, live or from the ``--json`` files of earlier runs.

A benchmark runs on a GPU machine; its rows are often recorded, and its page generated, on
another. :func:`read_bench_json` reads the files ``sparsity-explorer bench --json`` wrote (rows,
the measuring machine's environment and the command), refusing files of different GPUs, and
:func:`row_recorder` records rows with the measuring machine's provenance, not the recording
one's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["CONFIG_KEYS", "MODEL_CONFIG_KEYS", "read_bench_json", "row_recorder"]

#: Row keys that say what was timed (the store's config); the rest are the measurements.
CONFIG_KEYS = ("suite", "label", "m", "n", "k", "dtype", "impl", "mode", "alg", "sparsity")
#: Further config keys of whole-model rows.
MODEL_CONFIG_KEYS = ("model", "batch", "seq")
#: Row keys kept out of the store (status and error go in their own columns).
_NOT_METRICS = ("status", "error", "trace", "timings", "timings_decode")


def row_recorder(db: str | Path, provenance: dict | None = None) -> Callable[[dict], None]:
    """A sink that records benchmark rows in the results store ``db``, one call a row.

    Parameters
    ----------
    db : str or Path
        The store (created if absent; a file that is not a store is refused by
        :class:`~explorer.results.store.ResultStore`).
    provenance : dict, optional
        The measuring machine's provenance; default this process's.

    Returns
    -------
    callable
        ``record(row)``: the row's config keys (:data:`CONFIG_KEYS`) become its config, the rest
        its metrics, under kind ``bench-<suite>``.
    """
    from explorer.results.store import ResultStore

    store = ResultStore(db)

    def record(r: dict) -> None:
        keys = CONFIG_KEYS + (MODEL_CONFIG_KEYS if r.get("suite") == "models" else ())
        config = {k: r[k] for k in keys if r.get(k) is not None}
        if "n" in config:
            config["tokens"] = config["n"]
        metrics = {k: v for k, v in r.items() if k not in config and k not in _NOT_METRICS}
        store.record(
            f"bench-{r.get('suite', 'unknown')}",
            config,
            metrics,
            status=r.get("status", "ok"),
            error=r.get("error"),
            provenance=provenance,
        )

    return record


def read_bench_json(paths: Iterable[str | Path]) -> tuple[list[dict], dict, list[str]]:
    """The rows, environment and commands of ``--json`` files of one GPU, in the files' order.

    Parameters
    ----------
    paths : iterable of str or Path
        Files ``sparsity-explorer bench --json`` wrote.

    Returns
    -------
    (list of dict, dict, list of str)
        Every file's rows; the first file's environment; each file's command (files written
        before the command was kept say which file they are).

    Raises
    ------
    ValueError
        No file given; a file that cannot be read, is not JSON or has no ``rows`` and ``env``;
        a file measured on another device than the first.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> run = {"env": {"device": "NVIDIA H100 80GB HBM3"}, "rows": [{"suite": "host"}]}
    >>> _ = (folder / "host.json").write_text(json.dumps(run))
    >>> rows, env, commands = read_bench_json([folder / "host.json"])
    >>> len(rows), env["device"], commands
    (1, 'NVIDIA H100 80GB HBM3', ['(the rows of host.json)'])
    """
    rows: list[dict] = []
    env: dict | None = None
    commands: list[str] = []
    for path in map(Path, paths):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ValueError(
                f"{path}: cannot read it as a benchmark JSON file ({type(exc).__name__}: {exc}); "
                "give a file that `sparsity-explorer bench --json` wrote"
            ) from None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("rows"), list)
            or "env" not in data
        ):
            raise ValueError(
                f"{path}: no 'rows' list and 'env' in it; give a file that "
                "`sparsity-explorer bench --json` wrote"
            )
        device = data["env"].get("device")
        if env is None:
            env = dict(data["env"])
        elif device != env.get("device"):
            raise ValueError(
                f"{path} was measured on {device!r}, the first file on {env.get('device')!r}; "
                "merge the rows of one GPU at a time"
            )
        rows += data["rows"]
        commands.append(data.get("command") or f"(the rows of {path.name})")
    if env is None:
        raise ValueError("no benchmark JSON file given; name at least one --json file")
    return rows, env, commands
