"""Solutions to the exercises of 01_what_is_2to4.ipynb, one cell per exercise.

CI runs the notebook with these cells in place of the exercise cells
(``python -m explorer.workshop.solutions`` writes such a solved copy).
"""

# %% exercise 1.1
def my_mask_24(w):
    """Keep-mask of ``w`` (rows x cols, cols a multiple of 4): True for the 2 largest |w| per group of 4."""
    rows, cols = w.shape
    groups = w.abs().reshape(rows, cols // 4, 4)
    keep = torch.zeros(groups.shape, dtype=torch.bool)
    keep.scatter_(-1, groups.topk(2, dim=-1).indices, True)
    return keep.reshape(rows, cols)

# %% exercise 1.2
import math

answer_1_2 = math.comb(8, 4)

# %% exercise 1.3
values = 0.5 * 2  # bytes per weight: half the weights are kept, 2 bytes each
positions = 0.5 * 2 / 8  # a 2-bit position per kept weight
answer_1_3 = (values + positions) / 2  # over 2 bytes per dense weight
