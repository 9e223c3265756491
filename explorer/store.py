"""The results store moved to :mod:`explorer.results.store`; this name keeps working.

Examples
--------
>>> from explorer.store import ResultStore
>>> ResultStore is __import__("explorer.results.store").results.store.ResultStore
True
"""

from explorer.results.store import *  # noqa: F403
from explorer.results.store import __all__  # noqa: F401
