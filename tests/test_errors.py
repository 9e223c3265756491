import pytest

import explorer
from explorer.errors import MissingExtraError, require


def test_missing_extra_names_the_pip_install():
    with pytest.raises(MissingExtraError) as info:
        require("a_module_that_is_not_installed", "widgets")
    assert 'pip install "sparsity-explorer[widgets]"' in str(info.value)
    assert isinstance(info.value, ImportError)


def test_core_import_is_pure():
    import subprocess
    import sys

    code = (
        "import sys, explorer; "
        "heavy = [m for m in ('ipywidgets', 'plotly', 'cupy', 'nvmath', 'transformers', 'sklearn') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_lazy_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        explorer.nope  # noqa: B018
    assert "prune" in dir(explorer)
