"""The benchmark command: dense cuBLAS vs torch's eager cuSPARSELt vs the explorer's cached plans.

``python -m explorer.bench`` (or ``sparsity-explorer bench``) times, for each shape and dtype,
the median of CUDA-event timings after warm-up, in eager mode and as CUDA-graph replay, plus the
host cost per call; then the LLaMA-7B MLP block end to end, CSR/BSR at 50-99.9% sparsity, and the
explorer's N:M check kernel against the device's copy bandwidth. Rows are plain dicts; ``--json``
writes them, ``--db`` records them in a :class:`explorer.results.store.ResultStore`, ``--markdown``
writes the tables (``docs/bench-h100.md`` is generated this way). ``--from-json`` does the last
three without a GPU, from the ``--json`` files of runs made elsewhere, with their machine's
provenance (:mod:`explorer.bench.recording`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from explorer.bench.recording import read_bench_json, row_recorder
from explorer.results.markdown.bench import (
    format_decode,
    format_table,
    format_targets,
    render_markdown,
)
from explorer.results.markdown.models import format_models
from explorer.results.markdown.serving import format_generate, format_host

__all__ = ["main", "run_bench"]

_SUITES = ("models", "generate", "host", "decode", "matmul", "mlp", "unstructured", "kernel")


def _parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(
            f"shape {text!r} not understood; expected OUTxTOKENSxIN, e.g. 4096x1024x4096"
        ) from None
    return m, n, k


def run_bench(
    shapes: Iterable[tuple[int, int, int]] | None = None,
    dtypes: Iterable[torch.dtype | str] = ("float16", "bfloat16"),
    quick: bool = False,
    suites: Iterable[str] = _SUITES,
    graph: bool = True,
    mlp_tokens: Iterable[int] | None = None,
    progress: bool = True,
    on_row=None,
    job_timeout: float | None = None,
    log=None,
    models: Iterable[str] | None = None,
    compiled: bool = True,
    model_speed_modes: Iterable[str] = (),
) -> list[dict]:
    """Run the benchmark and return its rows.

    Parameters
    ----------
    shapes : iterable of (out, tokens, in), optional
        Matmul problems; default the full list (or the quick one with ``quick=True``).
        ``8192^3`` is also run in int8.
    dtypes : iterable
        float16 / bfloat16 (int8 rows are added for 8192^3 and the 4096 shapes).
    quick : bool
        The subset that covers the benchmark's targets
        (:data:`explorer.results.markdown.bench.TARGETS`).
    suites : iterable of str
        Any of ``models`` (whole models, :mod:`explorer.bench.models`), ``generate``
        (``model.generate`` tokens/s, :mod:`explorer.bench.generate`), ``host`` (host time per
        call, :mod:`explorer.bench.host_cost`), ``decode``, ``matmul``, ``mlp``,
        ``unstructured``, ``kernel``.
    graph : bool
        Also time CUDA-graph replay.
    mlp_tokens : iterable of int, optional
        Token counts of the ``mlp`` suite; default 4096 with ``quick=True``, else 1024, 4096
        and 16384.
    progress : bool
        Show a tqdm progress bar.
    on_row : callable, optional
        Called with each finished row (e.g. to record it in a store as it arrives).
    job_timeout : float, optional
        Seconds after which one case is abandoned (recorded as failed).
    log : file, optional
        Where to write one line per finished case.
    models : iterable of str, optional
        The whole models to time (default all of :data:`explorer.bench.models.MODEL_SPECS`).
    compiled : bool
        Also time whole models under ``torch.compile``.
    model_speed_modes : iterable of str
        Also time each whole-model run with
        :func:`~explorer.bench.model_speed.measure_model_speed`, the timing sweeps and the
        dashboard use on a user's own model, in these modes (``eager``, ``compile``,
        ``graphs``): the rows' ``model_speed_<mode>`` columns.

    Returns
    -------
    list of dict
        One row per (problem, implementation, mode) with ``ms``, ``host_us``, ``status``...

    Examples
    --------
    >>> rows = run_bench([(1024, 256, 1024)], suites=["matmul"], progress=False)  # doctest: +GPU
    >>> sorted({(r["impl"], r["mode"]) for r in rows if r["status"] == "ok"})[:2]
    [('dense', 'eager'), ('dense', 'graph')]
    """
    import torch
    from tqdm.auto import tqdm

    from explorer.bench import runner as R
    from explorer.dtypes import SPARSE_DTYPES, parse_dtype
    from explorer.results.model_speed import check_speed_mode

    if not torch.cuda.is_available():
        raise RuntimeError(
            "the benchmark needs a CUDA GPU with sparse tensor cores; none is visible here"
        )
    dts = [parse_dtype(d, allowed=SPARSE_DTYPES) for d in dtypes]
    speed_modes = tuple(check_speed_mode(m) for m in model_speed_modes)
    shapes = list(shapes) if shapes is not None else (R.QUICK_SHAPES if quick else R.FULL_SHAPES)
    suites = set(suites)
    jobs = []
    if "kernel" in suites:
        jobs.append(("kernel", lambda: R.bench_check_kernel(1.0)))
    if "matmul" in suites:
        for m, n, k in shapes:
            for dt in dts:
                jobs.append(
                    (
                        f"{m}x{k}@{n} {dt}",
                        lambda m=m, n=n, k=k, dt=dt: R.bench_matmul(m, n, k, dt, graph=graph),
                    )
                )
            if (m, n, k) in ((8192, 8192, 8192), (4096, 1024, 4096), (11008, 4096, 4096)):
                jobs.append(
                    (
                        f"{m}x{k}@{n} int8",
                        lambda m=m, n=n, k=k: R.bench_matmul(m, n, k, torch.int8, graph=graph),
                    )
                )
    if "mlp" in suites:
        toks = list(mlp_tokens) if mlp_tokens else ([4096] if quick else [1024, 4096, 16384])
        for t in toks:
            for dt in dts:
                jobs.append((f"mlp {t} {dt}", lambda t=t, dt=dt: R.bench_mlp(t, dt, graph=graph)))
    if "models" in suites:
        from explorer.bench.models import MODEL_SPECS, bench_whole_model

        for name in models or MODEL_SPECS:
            for dt in dts:
                if dt.itemsize != 2:
                    continue
                jobs.append(
                    (
                        f"models {name} {dt}",
                        lambda name=name, dt=dt: bench_whole_model(
                            name,
                            dt,
                            compiled=compiled,
                            torch_path=dt == torch.bfloat16,
                            log=log,
                            model_speed_modes=speed_modes,
                        ),
                    )
                )
    if "generate" in suites:
        from explorer.bench.generate import bench_generate

        for name in models or ("llama-8b", "qwen2-1.5b"):
            if name == "bert-base":
                continue  # an encoder: nothing to generate
            for dt in dts:
                if dt.itemsize == 2:
                    jobs.append(
                        (
                            f"generate {name} {dt}",
                            lambda name=name, dt=dt: bench_generate(name, dt, log=log),
                        )
                    )
    if "host" in suites:
        from explorer.bench.host_cost import bench_host_cost

        for dt in dts:
            if dt.itemsize == 2:
                jobs.append((f"host {dt}", lambda dt=dt: bench_host_cost(dt, log=log)))
    if "decode" in suites:
        from explorer.bench.decode import bench_decode

        sixteen = tuple(dt for dt in dts if dt.itemsize == 2)
        jobs.append(("decode layers", lambda: bench_decode(dtypes=sixteen, log=log)))
    if "unstructured" in suites:
        sp = (0.5, 0.9, 0.99, 0.999)
        jobs.append(("csr/bsr", lambda: R.bench_unstructured(sparsities=sp)))
    rows: list[dict] = []
    bar = tqdm(jobs, disable=not progress, desc="bench", unit="case")
    try:
        for name, job in bar:
            bar.set_postfix_str(name)
            t0 = time.perf_counter()
            new = R.safe(job, {"suite": name.split()[0], "label": name}, job_timeout)
            if log is not None:
                print(
                    f"[bench] {name}: {len(new)} rows, {time.perf_counter() - t0:.1f} s",
                    file=log,
                    flush=True,
                )
            for r in new:
                if on_row is not None:
                    on_row(r)
            rows.extend(new)
            torch.cuda.empty_cache()
    except KeyboardInterrupt:
        bar.write(f"interrupted: {len(rows)} rows kept")
    finally:
        bar.close()
    return rows


def environment() -> dict:
    """Device and library versions for the table's header."""
    import torch

    env = {"torch": torch.__version__}
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        env["cuda"] = torch.version.cuda
        try:
            from explorer.gpu.library.cusparselt import library_version

            env["cusparselt"] = library_version()
        except Exception as exc:  # the header shows why the version is unknown; timing goes on
            env["cusparselt"] = f"unavailable ({type(exc).__name__}: {exc})"
    import importlib.metadata as md

    try:
        env["nvmath-python"] = md.version("nvmath-python")
    except md.PackageNotFoundError:
        env["nvmath-python"] = None
    return env


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``python -m explorer.bench --help``).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 once the tables are printed, 2 without a CUDA GPU.
    """
    p = argparse.ArgumentParser(
        prog="sparsity-explorer bench",
        description="Time dense cuBLAS against torch's eager cuSPARSELt and the explorer's "
        "cached-plan 2:4 path (eager and CUDA-graph replay), on the current GPU.",
    )
    p.add_argument("--quick", action="store_true", help="the target shapes only (a few minutes)")
    p.add_argument("--shapes", help="comma-separated OUTxTOKENSxIN, e.g. 4096x1024x4096")
    p.add_argument("--dtypes", default="float16,bfloat16", help="e.g. float16,bfloat16")
    p.add_argument(
        "--suites", "--suite", default=",".join(_SUITES), help=f"any of {','.join(_SUITES)}"
    )
    p.add_argument("--models", help="whole models to time, e.g. llama-1b,bert-base (default all)")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile of whole models")
    p.add_argument(
        "--model-speed-modes",
        default="",
        help="also time whole models with the sweeps' and dashboard's timing in these modes, "
        "e.g. graphs,eager (model_speed_<mode> columns)",
    )
    p.add_argument("--no-graph", action="store_true", help="skip CUDA-graph replay")
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    p.add_argument("--markdown", type=Path, help="write the generated Markdown tables here")
    p.add_argument("--db", help="record every row in this results database")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--job-timeout", type=float, help="abandon one case after this many seconds")
    p.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="time nothing (no GPU needed): read the rows of these --json files, of one GPU, "
        "and write --markdown, record them in --db with their machine's provenance, print them",
    )
    p.add_argument("--commit", help="with --from-json: the commit the rows were measured on")
    args = p.parse_args(argv)
    if args.commit and not args.from_json:
        p.error("--commit names the commit of rows read with --from-json; give --from-json too")
    if args.from_json:
        return _from_json(args, p)
    from explorer.dtypes import SPARSE_DTYPES, parse_dtype  # imports torch: after --help

    try:
        shapes = [_parse_shape(s) for s in args.shapes.split(",")] if args.shapes else None
        dtypes = [parse_dtype(d.strip(), SPARSE_DTYPES, "--dtypes") for d in args.dtypes.split(",")]
    except (KeyError, ValueError) as exc:
        p.error(str(exc))
    from explorer.results.model_speed import check_speed_mode

    try:
        speed_modes = [
            check_speed_mode(m.strip()) for m in args.model_speed_modes.split(",") if m.strip()
        ]
    except ValueError as exc:
        p.error(f"--model-speed-modes: {exc}")
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    bad = [s for s in suites if s not in _SUITES]
    if bad:
        p.error(f"unknown suite(s) {bad}; expected any of {list(_SUITES)}")
    import torch

    if not torch.cuda.is_available():
        print("explorer.bench: no CUDA GPU visible; nothing to time.", file=sys.stderr)
        return 2
    sinks = []
    if args.db:
        sinks.append(row_recorder(args.db))
    if args.json:
        partial = args.json.with_suffix(".partial.jsonl")
        partial.write_text("")

        def _append(r: dict, path=partial) -> None:
            with path.open("a") as fh:
                fh.write(json.dumps(r, default=str) + "\n")

        sinks.append(_append)

    def on_row(r: dict) -> None:
        for sink in sinks:
            sink(r)

    rows = run_bench(
        shapes,
        dtypes,
        quick=args.quick,
        suites=suites,
        graph=not args.no_graph,
        progress=not args.no_progress,
        on_row=on_row,
        models=[m.strip() for m in args.models.split(",")] if args.models else None,
        compiled=not args.no_compile,
        log=sys.stderr,
        model_speed_modes=speed_modes,
    )
    env = environment()
    command = "sparsity-explorer bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.json:
        kept = {"env": env, "command": command.strip(), "rows": rows}
        args.json.write_text(json.dumps(kept, indent=1, default=str))
    if args.markdown:
        args.markdown.write_text(render_markdown(rows, env, command.strip()))
    _print_tables(rows)
    return 0


def _from_json(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--from-json``: the page, the store's rows and the tables from earlier runs' files."""
    from explorer.results.quantized_speed import benchmark_provenance

    try:
        rows, env, commands = read_bench_json(args.from_json)
    except ValueError as exc:
        parser.error(f"--from-json: {exc}")
    if args.commit:
        env = {**env, "commit": args.commit}
    if args.db:
        record = row_recorder(
            args.db, benchmark_provenance({**env, "command": "; ".join(commands)})
        )
        for row in rows:
            record(row)
        print(f"recorded {len(rows)} rows in {args.db}", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(render_markdown(rows, env, "`, `".join(commands)))
    _print_tables(rows)
    return 0


def _print_tables(rows: list[dict]) -> None:
    """Print the tables of the suites ``rows`` hold, then the layer table and the targets."""
    if any(r.get("suite") == "models" for r in rows):
        print(format_models(rows))
        print()
    if any(r.get("suite") == "generate" for r in rows):
        print(format_generate(rows))
        print()
    if any(r.get("suite") == "host" for r in rows):
        print(format_host(rows))
        print()
    if any(r.get("suite") == "decode" for r in rows):
        print(format_decode(rows))
        print()
    print(format_table(rows))
    print()
    print(format_targets(rows))
