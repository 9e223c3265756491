"""The GPU tests mirror ``explorer.gpu``'s rooms; their shared helpers stay here.

``gpu_helpers`` (masks, relative errors) is imported by test files in every room folder, so this
folder goes on the import path for all of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
