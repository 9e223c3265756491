"""``python -m explorer``: the same as the ``sparsity-explorer`` command."""

from explorer.cli import main

raise SystemExit(main())
