"""Solutions to the exercises of 03_cusparselt_step_by_step.ipynb, one cell per exercise.

CI runs the notebook with these cells in place of the exercise cells
(``python -m explorer.workshop.solutions`` writes such a solved copy).
"""

# %% exercise 3.1
def pad(n, multiple):
    return -(-n // multiple) * multiple  # round up


answer_3_1 = (pad(100, 8), pad(100, 16))

# %% exercise 3.2
byte = int(cw.metadata[0, 0])
group0, group1 = byte & 0xF, byte >> 4  # the first group sits in the low 4 bits
answer_3_2 = ((group0 & 3, group0 >> 2), (group1 & 3, group1 >> 2))

# %% exercise 3.3
def my_decompress(cw):
    """The dense weight (zeros in place) that ``cw`` stores."""
    dense = torch.zeros(cw.shape, dtype=cw.values.dtype)
    dense.scatter_(1, cw.columns(), cw.values)  # put every kept value back in its column
    return dense
