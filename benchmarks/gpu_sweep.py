"""``sweep --gpus``, checked on the machine's GPUs: which device each row ran on, and the timings
against the same sweep run in one process.

For each model (the bundled ``digits-mlp`` and a SmolLM2-135M-shaped ``save_pretrained`` folder
with random weights: 30 layers, hidden 576, MLP 1536, 9 heads, 3 KV heads, written here because
no weights may be downloaded), this runs ``sparsity-explorer sweep`` twice as a user would, with
``--gpus GPUS`` and then in one process, each into its own database and with its own empty
cache (each pays the tuning search of shapes in no shipped table), and prints:

* the wall time of each run;
* every speed row (layer speed and whole-model speed) with the GPU index and UUID the row
  records, checked against ``nvidia-smi -L``;
* each speedup of the ``--gpus`` run over the same row of the in-process run.

It also checks that a ``--gpus`` value naming a device the machine lacks is refused with a
one-line message. Run on a GPU machine::

    python benchmarks/gpu_sweep.py --out /tmp/gpu-sweep --gpus all
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from explorer.models.tiny import sample_text, save_tiny_llama
from explorer.results.store import ResultStore

SMOLLM2_SIZES = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    max_position_embeddings=2048,
)


def gpu_uuids() -> dict[int, str]:
    """``nvidia-smi -L``: device index to UUID."""
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        if line.startswith("GPU ") and "UUID: " in line:
            index = int(line.split(":")[0].split()[1])
            found[index] = line.split("UUID: ")[1].rstrip(")").strip()
    return found


def run_sweep(args: list[str], log: Path, cache: Path) -> float:
    """Run ``sparsity-explorer sweep ARGS`` as a user would, with its own empty cache (so the
    tuning search of shapes in no table is paid by each run alike); its wall time in seconds."""
    env = {**os.environ, "SPARSITY_EXPLORER_CACHE": str(cache)}
    start = time.perf_counter()
    with open(log, "w") as fh:
        code = subprocess.run(
            [sys.executable, "-m", "explorer", "sweep", *args, "--no-progress"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        ).returncode
    seconds = time.perf_counter() - start
    print(log.read_text()[-1500:])
    if code:
        raise SystemExit(f"sweep {' '.join(args)} exited with {code}; log: {log}")
    return seconds


def speed_rows(db: Path) -> dict[tuple, dict]:
    """The ok layer-speed and model-speed rows of ``db``, keyed by what they measured."""
    rows = {}
    for rec in ResultStore(db).query().records():
        if rec["kind"] not in ("layer-speed", "model-speed") or rec["status"] != "ok":
            continue
        key = (
            rec["kind"],
            rec.get("config.method") or rec.get("config.of") or "",
            str(rec.get("config.shape") or rec.get("config.layers") or ""),
            rec.get("config.dtype"),
            rec.get("config.tokens"),
        )
        rows[key] = rec
    return rows


def speedup(rec: dict) -> float | None:
    """A speed row's measured speed-up (None where it has none)."""
    value = rec.get("metrics.speedup")
    return None if value is None else float(value)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="a new folder for every file")
    p.add_argument("--gpus", default="all")
    p.add_argument("--models", default="digits-mlp,smollm2-shaped")
    p.add_argument("--methods", default="magnitude,wanda")
    p.add_argument("--tokens", default="1024,4096")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=False)
    uuids = gpu_uuids()
    print(f"nvidia-smi -L: {uuids}")

    bad = f"{max(uuids) + 1},"
    refused = subprocess.run(
        [sys.executable, "-m", "explorer", "sweep", "--gpus", bad, "--db", str(args.out / "x.db")],
        capture_output=True,
        text=True,
    )
    print(f"--gpus {bad}: exit {refused.returncode}: {refused.stderr.strip()}")
    print(f"database written by the refused run: {(args.out / 'x.db').exists()}")

    for model in args.models.split(","):
        grid = ["--methods", args.methods, "--patterns", "2:4", "--tokens", args.tokens]
        if model == "smollm2-shaped":
            folder = save_tiny_llama(args.out / "smollm2-shaped", seed=0, **SMOLLM2_SIZES)
            text = args.out / "corpus.txt"
            text.write_text(sample_text())
            source = ["--model", str(folder), "--text", str(text), "--dtypes", "bfloat16"]
            grid += ["--calibration-samples", "16"]
        else:
            source = ["--model", model]
        walls = {}
        for label, extra in (("gpus", ["--gpus", args.gpus]), ("one process", [])):
            stem = args.out / f"{model}-{label.replace(' ', '-')}"
            walls[label] = run_sweep(
                [*source, *grid, "--db", f"{stem}.db", *extra],
                Path(f"{stem}.log"),
                Path(f"{stem}-cache"),
            )
        print(
            f"\n## {model}: wall {walls['gpus']:.1f} s with --gpus {args.gpus}, "
            f"{walls['one process']:.1f} s in one process"
        )
        on_gpus = speed_rows(args.out / f"{model}-gpus.db")
        alone = speed_rows(args.out / f"{model}-one-process.db")
        print(
            "| row | tokens | GPU index | UUID matches nvidia-smi | speedup --gpus | "
            "speedup one process | ratio |"
        )
        print("|---|---|---|---|---|---|---|")
        for key, rec in sorted(on_gpus.items(), key=lambda kv: str(kv[0])):
            index = rec.get("provenance.gpu_index")
            match = index is not None and uuids.get(index) == rec.get("provenance.gpu_uuid")
            a, b = speedup(rec), speedup(alone[key]) if key in alone else None
            ratio = f"{a / b:.3f}" if a and b else ""
            print(
                f"| {key[0]} {key[1]} {key[2]} {key[3]} | {key[4]} | {index} | {match} | "
                f"{a if a is None else f'{a:.3f}'} | {b if b is None else f'{b:.3f}'} | {ratio} |"
            )
        missing = sorted(set(alone) - set(on_gpus), key=str)
        if missing:
            print(f"rows of the one-process run with no --gpus twin: {missing}")


if __name__ == "__main__":
    main()
