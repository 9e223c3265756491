"""The ``sparsity-explorer`` command line.

Its verbs: dashboard, doctor, bench, tune, sweep, report, store, save, export and check.

Every verb has ``--help``. Errors print one line on stderr and exit with status 2; an
interrupted sweep exits with 130 and resumes when the same command is run again.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

from explorer.output_paths import check_output_path

__all__ = ["main"]

PROG = "sparsity-explorer"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the verb and pointing at --help."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _int_at_least(low: int, what: str, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text) if text.isascii() else None  # int() also reads full-width digits
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            top = f" and at most {high}" if high is not None else ""
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a valid {what}: expected a whole number of at least {low}{top}"
            )
        return value

    return parse


def _parser() -> _Parser:
    from explorer.results.store import explorer_version

    parser = _Parser(
        prog=PROG,
        description="Explore weight sparsity (2:4 and N:M) in PyTorch models: see it, prune, "
        "and measure accuracy against real speedups.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {explorer_version()}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)

    p = verbs.add_parser(
        "dashboard",
        help="open the dashboard in Voila",
        description="Serve the dashboard notebook (notebooks/dashboard.ipynb) with Voila.",
    )
    p.add_argument("--notebook", type=Path, help="another dashboard notebook to serve")
    p.add_argument(
        "--port",
        type=_int_at_least(1, "port", 65535),
        help="port to serve on (Voila's default otherwise)",
    )
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")

    p = verbs.add_parser(
        "doctor",
        help="say layer by layer whether 2:4 will run fast, and why not",
        description="Diagnose a bundled model for 2:4 sparse matmuls on a target GPU.",
    )
    p.add_argument(
        "model",
        help="a bundled model (digits-mlp, fashion-mlp, minilm, smollm2) or a folder written "
        "by save_pretrained",
    )
    p.add_argument("--dtype", default="float16", help="float16 (default), bfloat16, int8, ...")
    p.add_argument(
        "--tokens",
        type=_int_at_least(1, "token count"),
        default=1024,
        help="tokens per matmul (default 1024)",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument(
        "--capability",
        help="target GPU compute capability, e.g. 9.0 (default: this GPU, or an H100)",
    )
    target.add_argument("--device", help="target GPU by name, e.g. A100 (instead of --capability)")
    p.add_argument(
        "--backend",
        default="cusparselt",
        choices=("cusparselt", "torch", "cutlass"),
        help="the sparse kernel path to judge (default cusparselt)",
    )

    verbs.add_parser(
        "bench",
        help="time dense against 2:4 sparse layers on this GPU",
        description="Time dense against 2:4 sparse matmuls; see 'sparsity-explorer bench "
        "--help' for the benchmark's own options.",
        add_help=False,
    )

    verbs.add_parser(
        "tune",
        help="tune cuSPARSELt's algorithms for common model shapes on this GPU",
        description="See 'sparsity-explorer tune --help' for its own options.",
        add_help=False,
    )

    p = verbs.add_parser(
        "sweep",
        help="run a resumable grid of pruning (and speed) measurements",
        description="Prune a bundled model, or your own Hugging Face checkpoint folder "
        "(--model ./my-model --text corpus.txt), over methods x patterns x layer sets x dtypes, "
        "recording accuracy and pruning time (and, on a CUDA GPU, layer speed and each 2:4 "
        "pruned model timed whole, dense against sparse) in a results "
        "database. Each cell is committed when it finishes; run the same command again to "
        "resume an interrupted sweep.",
    )
    p.add_argument(
        "--model",
        default="digits-mlp",
        help="bundled model (default digits-mlp), or a folder written by save_pretrained",
    )
    p.add_argument(
        "--text",
        type=Path,
        help="text file a checkpoint folder is evaluated (its end) and calibrated (before) on; "
        "required with a folder",
    )
    p.add_argument("--methods", type=_csv, default=["magnitude"], help="e.g. magnitude,wanda")
    p.add_argument("--patterns", type=_csv, default=["2:4"], help="e.g. 2:4,4:8,unstructured:0.5")
    p.add_argument(
        "--layer-sets",
        type=lambda s: _csv(s),
        default=["all"],
        help="'all' (the model's default layers), 'every', 'fast' (fast once 2:4), 'mlp', or name globs joined by '|'",
    )
    p.add_argument("--dtypes", type=_csv, default=["float16"], help="e.g. float16,bfloat16")
    p.add_argument(
        "--tokens",
        type=_csv,
        default=["1024"],
        help="token counts (batch x sequence) for the layer speed rows and the timing of each "
        "pruned model, e.g. 1024,4096 (default 1024)",
    )
    p.add_argument(
        "--speed-mode",
        default="graphs",
        help="how each pruned 2:4 model is timed whole on a GPU: graphs (CUDA graphs, the "
        "GPU's time alone; default), eager, or compile (torch.compile's default mode)",
    )
    p.add_argument(
        "--quantize",
        type=_csv,
        default=[],
        help="also quantize each sparsegpt cell's kept weights jointly, and the dense model "
        "(GPTQ): int4, int8 (weight-only, group-wise scales), e.g. --quantize int4",
    )
    p.add_argument(
        "--group-size",
        type=_int_at_least(4, "group size"),
        default=128,
        help="input columns per scale of the quantized cells (default 128)",
    )
    p.add_argument(
        "--update",
        choices=["admm"],
        help="re-optimise each pruned layer's kept weights on calibration data after its mask "
        "(on the grid where quantized)",
    )
    p.add_argument("--db", type=Path, help="results database (default: the per-user cache)")
    p.add_argument("--name", help="sweep id, to grow one sweep over several runs")
    p.add_argument(
        "--calibration-samples", type=_int_at_least(1, "calibration sample count"), default=128
    )
    p.add_argument("--seed", type=_int_at_least(0, "seed"), default=0)
    p.add_argument("--retry-failed", action="store_true", help="run failed cells again")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=_int_at_least(1, "worker count"),
        help="run cells in N worker processes (default: in this process)",
    )
    where.add_argument("--scheduler", help="a dask.distributed scheduler address to run cells on")
    where.add_argument(
        "--gpus",
        help="run cells on a local Dask cluster with one worker per GPU: 'all', a count N, "
        "or device indices such as 0,2,5",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = verbs.add_parser(
        "report",
        help="write a self-contained HTML report (and CSV/JSON exports)",
        description="Write the trade-off plot (Pareto frontier marked), the tables and the "
        "versions of a results database to one self-contained HTML file.",
    )
    p.add_argument("--db", type=Path, help="results database (default: the per-user cache)")
    p.add_argument("--out", type=Path, default=Path("report.html"), help="HTML file to write")
    p.add_argument("--csv", type=Path, help="also export every row as CSV")
    p.add_argument("--json", type=Path, help="also export every row as JSON")
    p.add_argument("--no-reference", action="store_true", help="leave out the reference rows")
    p.add_argument("--title", default="sparsity-explorer report")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing files at --out, --csv and --json (never a database, device or "
        "folder)",
    )

    p = verbs.add_parser(
        "store",
        help="check a results database, or recover the readable rows of a damaged one",
        description="'store check DB' says whether a results database is healthy and what is "
        "damaged; 'store recover DB NEW' copies every readable row into the new file NEW. "
        "Neither writes to DB.",
    )
    p.add_argument("action", choices=("check", "recover"), help="check or recover")
    p.add_argument("db", type=Path, help="the results database")
    p.add_argument("new", type=Path, nargs="?", help="for recover: the new file to create")
    _checkpoint_verbs(verbs)
    return parser


def _checkpoint_verbs(verbs) -> None:
    p = verbs.add_parser(
        "save",
        help="prune a bundled model and save it as a compressed 2:4 checkpoint",
        description="Prune a bundled model and write one safetensors file with its 2:4 layers "
        "stored compressed (kept values plus 2-bit positions) and a manifest of every layer.",
    )
    p.add_argument(
        "model",
        help="a bundled model (digits-mlp, fashion-mlp, minilm, smollm2) or a folder written "
        "by save_pretrained",
    )
    p.add_argument("--out", type=Path, required=True, help="the .safetensors file to write")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace an existing file at --out (never a database, device or folder)",
    )
    p.add_argument("--method", default="magnitude", help="pruning method (default magnitude)")
    p.add_argument("--pattern", default="2:4", help="sparsity pattern (default 2:4)")
    p.add_argument("--dtype", default="float16", help="dtype to store (default float16)")
    p.add_argument("--calibration-samples", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = verbs.add_parser(
        "export",
        help="export a saved checkpoint to ONNX or a Hugging Face folder",
        description="Load a checkpoint written by 'save' (verifying it) and export the dense "
        "masked model: ONNX via torch.onnx.export, checked for TensorRT's sparse tactics, or a "
        "Hugging Face save_pretrained folder with the manifest beside it.",
    )
    p.add_argument("checkpoint", type=Path, help="a .safetensors checkpoint from 'save'")
    p.add_argument("--onnx", type=Path, help="write this .onnx file")
    p.add_argument("--pretrained", type=Path, help="write this Hugging Face folder")
    p.add_argument("--batch", type=int, default=8, help="rows of the example input (ONNX)")
    p.add_argument("--dtype", default="float16", help="TensorRT build precision for the check")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per call for the check")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace existing files at --onnx and in --pretrained (never a database, device "
        "or folder)",
    )

    p = verbs.add_parser(
        "check",
        help="check an ONNX file for TensorRT's 2:4 sparse tactics, or verify a checkpoint",
        description="For an .onnx file: report, weight by weight, whether it is 2:4 along the "
        "dimension TensorRT needs and whether its shape can take sparse tactics. For a "
        "checkpoint from 'save': verify its manifest, checksums and 2:4 layers.",
    )
    p.add_argument(
        "file", type=Path, help="an .onnx file, a .safetensors checkpoint or an exported folder"
    )
    p.add_argument("--dtype", default="float16", help="TensorRT build precision (default float16)")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per call (default 1024)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit with 1 when any layer or weight is not 2:4, or none was checked",
    )


def _dashboard(args) -> int:
    checkout = Path(__file__).resolve().parents[1]
    notebook = args.notebook or checkout / "notebooks" / "dashboard.ipynb"
    if not notebook.is_file():
        raise FileNotFoundError(
            f"dashboard notebook {notebook} not found; run from a checkout of sparsity-explorer "
            "or pass --notebook PATH"
        )
    if importlib.util.find_spec("voila") is None:
        print(
            f'{PROG}: Voila is not installed; install it with: pip install "sparsity-explorer[widgets]"',
            file=sys.stderr,
        )
        return 2
    command = [sys.executable, "-m", "voila", str(notebook.resolve())]
    if args.port:
        command.append(f"--port={args.port}")
    if args.no_browser:
        command.append("--no-browser")
    # Run from the checkout so Voila reads its voila.json (theme, tracebacks, allowed files).
    cwd = checkout if (checkout / "voila.json").is_file() else None
    return subprocess.call(command, cwd=cwd)


def _doctor(args) -> int:
    from explorer.diagnosis import doctor, resolve_target
    from explorer.models import MODELS, load
    from explorer.models.folder import is_checkpoint_path
    from explorer.models.pretrained import load_model

    device = args.capability or args.device
    resolve_target(device)  # a bad target is refused before the model loads
    if args.model not in MODELS and is_checkpoint_path(args.model):
        model = load_model(args.model)  # a checkpoint folder: the layers need no text
    else:
        model = load(args.model).model
    report = doctor(
        model, dtype=args.dtype, tokens=args.tokens, device=device, backend=args.backend
    )
    print(report)
    return 0


def _bench(argv: list[str]) -> int:
    try:
        from explorer.bench import main as bench_main
    except ImportError as exc:
        if argv and argv[0] in ("-h", "--help"):
            print(
                f"usage: {PROG} bench [options]\n\nTime dense against 2:4 sparse matmuls "
                f"(explorer.bench is not available here: {exc})."
            )
            return 0
        raise FileNotFoundError(
            f"the benchmark module explorer.bench is not available ({exc})"
        ) from exc
    code = bench_main(argv)
    return int(code or 0)


def _tune(argv: list[str]) -> int:
    from explorer.gpu.library.tune_cli import main as tune  # torch loads on first use

    return tune(argv)


def _sweep(args) -> int:
    from explorer.results.store import ResultStore
    from explorer.sweeps import sweep
    from explorer.sweeps.grid import SweepConfig

    if args.db is not None and str(args.db) == ":memory:":
        raise ValueError(
            "--db :memory: keeps results in memory only: they would vanish when the sweep ends; "
            "pass a file such as --db results.db (or leave --db out for the per-user store)"
        )
    grid = dict(
        methods=args.methods, patterns=args.patterns, layer_sets=args.layer_sets,
        dtypes=args.dtypes, tokens=args.tokens, calibration_samples=args.calibration_samples,
        seed=args.seed, text=args.text, speed_mode=args.speed_mode, quantize=args.quantize,
        group_size=args.group_size, update=args.update,
    )  # fmt: skip
    # A grid that is refused is refused before the results database is created.
    SweepConfig.make(args.model, **grid)
    if args.name is not None and not args.name.strip():
        raise ValueError(f"--name {args.name!r}: expected a non-empty sweep id")
    executor = None
    devices = None
    if args.gpus is not None:
        from explorer.sweeps.gpu_cluster import cuda_device_count, parse_gpus

        devices = parse_gpus(args.gpus, cuda_device_count())  # before the database is created
    if devices is not None:
        from explorer.sweeps.gpu_cluster import start_gpu_cluster

        executor = start_gpu_cluster(devices)
    elif args.scheduler:
        from explorer.errors import require

        executor = require("dask.distributed", "distributed").Client(args.scheduler)
    elif args.workers is not None:
        import concurrent.futures
        import multiprocessing

        from explorer.sweeps.loading import hide_training_bars

        executor = concurrent.futures.ProcessPoolExecutor(
            args.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=hide_training_bars if args.no_progress else None,
        )
    store = ResultStore(args.db)
    try:
        result = sweep(args.model, db=store, progress=not args.no_progress, executor=executor,
                       name=args.name, retry_failed=args.retry_failed, **grid)  # fmt: skip
        print(result)
        for row in result.rows(store):
            metric = row.metrics.get("metric")
            value = row.metrics.get(metric) if metric else None
            what = " ".join(
                str(row.config.get(k))
                for k in ("method", "pattern", "layers", "dtype", "tokens")
                if row.config.get(k) is not None
            )
            shown = f"{metric}={value:.4g}" if isinstance(value, (int, float)) else ""
            if isinstance(row.metrics.get("speedup"), (int, float)):
                shape = "x".join(map(str, row.config.get("shape") or []))
                if row.kind == "model-speed":
                    shape = str(row.metrics.get("timed_as") or row.config.get("mode"))
                shown = f"{shape} speedup={row.metrics['speedup']:.2f}x"
            print(f"  {row.kind:<12} {row.status:<8} {what:<36} {shown} {row.error or ''}".rstrip())
        print(f"report: {PROG} report --db {shlex.quote(str(store.path))} --out report.html")
    finally:
        store.close()
        if devices is not None:
            from explorer.sweeps.gpu_cluster import close_gpu_cluster

            close_gpu_cluster(executor)
        elif executor is not None:
            (executor.close if hasattr(executor, "close") else executor.shutdown)()
    return 0


def _report(args) -> int:
    from explorer.results.html import write_report

    out = write_report(
        args.db,
        args.out,
        csv=args.csv,
        json=args.json,
        include_reference=not args.no_reference,
        title=args.title,
        force=args.force,
    )
    print(f"wrote {out}" + "".join(f", {p}" for p in (args.csv, args.json) if p))
    return 0


def _store(args) -> int:
    from explorer.results.store.repair import check_store, recover_store

    if args.action == "check":
        if args.new is not None:
            raise ValueError(f"store check takes one database, got a second path {args.new}")
        health = check_store(args.db)
        print(health)
        for problem in health.problems:
            print(f"  {problem}")
        return 0 if health.ok else 1
    if args.new is None:
        raise ValueError(
            f"store recover needs the new file to copy the rows into: {PROG} store recover "
            f"{shlex.quote(str(args.db))} NEW.db"
        )
    print(recover_store(args.db, args.new))
    return 0


def _save(args) -> int:
    from explorer.checkpoint import save_sparse
    from explorer.dtypes import parse_dtype
    from explorer.models import load
    from explorer.pruning import METHODS, prune

    check_output_path(args.out, overwrite=args.force, what="checkpoint", flag="--force")
    dtype = parse_dtype(args.dtype)
    bundle = load(args.model)
    calibration = None
    if args.method in METHODS and METHODS[args.method].needs_calibration:
        calibration = bundle.calibration(args.calibration_samples, seed=args.seed)
    result = prune(
        bundle.model,
        args.method,
        args.pattern,
        calibration=calibration,
        filter_fn=bundle.filter_fn,
        seed=args.seed,
        progress=not args.no_progress,
    )
    bundle.model.to(dtype)  # zeros stay zeros: the pattern survives the cast
    provenance = {
        "command": f"{PROG} save {args.model} --method {args.method} --pattern {args.pattern}",
        "calibration_samples": args.calibration_samples if calibration is not None else 0,
    }
    report = save_sparse(
        bundle,
        args.out,
        result,
        provenance=provenance,
        progress=not args.no_progress,
        overwrite=args.force,
    )
    print(report)
    return 0


def _example_input(model, manifest, batch: int):
    import torch

    described = manifest.get("model") or {}
    config = described.get("hf_config") or {}
    if described.get("bundle"):
        from explorer.models import load

        first = load(described["bundle"]).calibration(batch)[0]
    elif config.get("vocab_size"):
        first = {"input_ids": torch.randint(0, int(config["vocab_size"]), (1, 16))}
        if "use_cache" in config:
            first["use_cache"] = False  # the exporter cannot return a KV-cache object
    else:
        raise ValueError("cannot make an example input for this model; use explorer.export_onnx")
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)

    def cast(x):
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    if isinstance(first, dict):
        return {k: cast(v)[:batch] if isinstance(v, torch.Tensor) else v for k, v in first.items()}
    return cast(first)[:batch]


def _export(args) -> int:
    from explorer.checkpoint import export_onnx, export_pretrained, load_sparse, read_checkpoint

    if not args.onnx and not args.pretrained:
        raise ValueError("say what to write: --onnx FILE and/or --pretrained DIR")
    if args.onnx:
        check_output_path(args.onnx, overwrite=args.force, what="ONNX export", flag="--force")
    manifest, _ = read_checkpoint(args.checkpoint)
    model = load_sparse(args.checkpoint, progress=False).eval()
    if args.pretrained:
        folder = export_pretrained(
            model, args.pretrained, provenance=manifest["provenance"], overwrite=args.force
        )
        print(f"wrote {folder}")
    if args.onnx:
        example = _example_input(model, manifest, args.batch)
        report = export_onnx(
            model,
            args.onnx,
            example,
            dtype=args.dtype,
            tokens=args.tokens,
            overwrite=args.force,
        )
        print(report)
        data = Path(f"{args.onnx}.data")
        print(f"wrote {args.onnx}" + (f" and its weights {data}" if data.is_file() else ""))
    return 0


def _check(args) -> int:
    from explorer.checkpoint import check_onnx, verify_checkpoint, verify_pretrained

    if args.file.is_dir():
        report = verify_pretrained(args.file)
    elif args.file.suffix.lower() == ".onnx":
        report = check_onnx(args.file, dtype=args.dtype, tokens=args.tokens)
    else:
        report = verify_checkpoint(args.file)
    print(report)
    problems = report.strict_problems if args.strict else ()
    for problem in problems:
        print(f"{PROG}: check --strict: {' '.join(problem.split())}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``sparsity-explorer`` command line.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 on success, 1 when ``store check`` finds damage, 2 on an error
        (one line on stderr; set
        ``SPARSITY_EXPLORER_DEBUG=1`` for the traceback), 130 when interrupted.

    Examples
    --------
    >>> import os, tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "report.html")
    >>> main(["report", "--db", ":memory:", "--out", out])  # doctest: +ELLIPSIS
    wrote ...report.html
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    from explorer.errors import MissingExtraError
    from explorer.results.store import StoreError

    try:
        if argv[:1] == ["bench"]:
            return _bench(argv[1:])
        if argv[:1] == ["tune"]:
            return _tune(argv[1:])
        args = _parser().parse_args(argv)
        if args.verb is None:
            _parser().print_help()
            return 0
        handler = {
            "dashboard": _dashboard,
            "doctor": _doctor,
            "sweep": _sweep,
            "report": _report,
            "store": _store,
        }
        handler.update(save=_save, export=_export, check=_check)
        return handler[args.verb](args)
    except KeyboardInterrupt:
        print(
            f"{PROG}: interrupted; finished sweep cells are kept: run the same command again to "
            "resume",
            file=sys.stderr,
        )
        return 130
    except (
        StoreError,
        MissingExtraError,
        ValueError,
        TypeError,
        OSError,
        RuntimeError,
        sqlite3.DatabaseError,
    ) as exc:
        if os.environ.get("SPARSITY_EXPLORER_DEBUG"):
            raise
        message = " ".join(_ANSI.sub("", str(exc)).split())
        if isinstance(exc, sqlite3.DatabaseError):
            message = (
                f"results database: {message}; see {PROG} store check DB and {PROG} store "
                "recover DB NEW.db"
            )
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
