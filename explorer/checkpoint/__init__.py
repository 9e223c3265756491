"""Save, load and ship a 2:4 model: compressed checkpoints, a manifest, and deployment checks.

* :func:`save_sparse` / :func:`load_sparse`: one safetensors file with the 2:4 layers stored
  compressed (about 56% of the dense bytes in 16-bit) and a manifest of every layer, checked
  in full on load; never pickle.
* :func:`export_pretrained` / :func:`export_onnx`: the dense masked model for other runtimes.
* :func:`check_onnx`: which weights of an ONNX file can take TensorRT's 2:4 sparse tactics.
* :func:`check_file`: what ``sparsity-explorer check [--strict]`` does, for any of the above.

Nothing a checkpoint says is trusted unchecked: its manifest is parsed with bounded nesting and
number sizes and checked field by field (:mod:`~explorer.checkpoint.manifest_schema`), and a
model it describes is built on the meta device and compared with the file before any memory is
allocated (:mod:`~explorer.checkpoint.rebuild`).

``safetensors``, ``onnx`` and ``onnxscript`` come with ``pip install "sparsity-explorer[deploy]"``.

Examples
--------
>>> import torch, tempfile, os, explorer
>>> from torch import nn
>>> net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).half()
>>> _ = explorer.prune(net, "magnitude", "2:4", progress=False)
>>> path = os.path.join(tempfile.mkdtemp(), "net.safetensors")
>>> explorer.save_sparse(net, path, progress=False).sparse_ratio
0.5625
"""

from .check import check_file
from .export import (
    MANIFEST_NAME,
    export_onnx,
    export_pretrained,
    sparse_layers,
    verify_pretrained,
)
from .load import (
    load_sparse,
    read_checkpoint,
    read_int4_weights,
    read_manifest,
    verify_checkpoint,
)
from .manifest import CheckpointCancelled, CheckpointError
from .onnx_check import OnnxReport, OnnxWeight, check_onnx
from .report import CheckpointReport, LayerRecord
from .save import save_sparse

__all__ = [
    "MANIFEST_NAME",
    "CheckpointCancelled",
    "CheckpointError",
    "CheckpointReport",
    "LayerRecord",
    "OnnxReport",
    "OnnxWeight",
    "check_file",
    "check_onnx",
    "export_onnx",
    "export_pretrained",
    "load_sparse",
    "read_checkpoint",
    "read_int4_weights",
    "read_manifest",
    "save_sparse",
    "sparse_layers",
    "verify_checkpoint",
    "verify_pretrained",
]
