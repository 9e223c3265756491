"""The workshop's helpers: check cells that say right or not yet, and the solutions filler.

Examples
--------
>>> from explorer.workshop import checks
>>> checks.padded_tokens((104, 112)).ok
True
"""

from explorer.workshop import checks
from explorer.workshop.solutions import fill, read_solutions
from explorer.workshop.verdict import EXERCISES, Verdict

__all__ = ["EXERCISES", "Verdict", "checks", "fill", "read_solutions"]
