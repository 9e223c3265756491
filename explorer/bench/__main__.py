"""``python -m explorer.bench``: see :func:`explorer.bench.main`."""

import sys

from explorer.bench import main

if __name__ == "__main__":
    sys.exit(main())
