"""Solutions to the exercises of 04_accuracy_vs_speedup.ipynb, one cell per exercise.

CI runs the notebook with these cells in place of the exercise cells
(``python -m explorer.workshop.solutions`` writes such a solved copy).
"""

# %% exercise 4.1
blocking = [f for f in report.reasons(hidden) if f.severity in ("warn", "error")]
print(*blocking, sep="\n")
answer_4_1 = blocking[0].code

# %% exercise 4.2
# 16-bit, and enough tokens that 2048 x 8192 x tokens passes the doctor's size (a multiple of 8)
answer_4_2 = {"dtype": "bfloat16", "tokens": 4096}

# %% exercise 4.3
def whole_model_speedup(fraction, layer_speedup):
    """The model's speedup when ``fraction`` of its time runs ``layer_speedup`` times faster."""
    return 1 / ((1 - fraction) + fraction / layer_speedup)

# %% exercise 4.4
def loss(point):
    return dense_score - point.score if bundle.higher_is_better else point.score - dense_score


allowed = [p for p in plot.frontier() if loss(p) <= tolerance]
answer_4_4 = max(allowed, key=lambda p: p.speedup).label

# %% exercise 4.5
def bits_per_weight(value_bits, sparse, scale_bits, group_size):
    """Bits stored per weight of the dense matrix."""
    values = (value_bits + 2) / 2 if sparse else value_bits  # 2:4: half the values, 2-bit positions
    return values + scale_bits / group_size
