"""Solutions to the exercises of 02_pruning_real_models.ipynb, one cell per exercise.

CI runs the notebook with these cells in place of the exercise cells
(``python -m explorer.workshop.solutions`` writes such a solved copy).
"""

# %% exercise 2.1
def my_wanda_scores(weight, x):
    """Wanda's importance of every weight: |W_ij| * ||x_j||_2, shaped like ``weight``."""
    return weight.abs() * x.norm(dim=0)  # x.norm(dim=0): one norm per input feature j

# %% exercise 2.2
at_24 = {m: results[m, "2:4"][0] for m in methods}
pick = max if bundle.higher_is_better else min
answer_2_2 = pick(at_24, key=at_24.get)

# %% exercise 2.3
explorer.finetune(bundle.model, result, bundle.train_data, steps=finetune_steps, progress=False)
answer_2_3 = bundle.evaluate()[bundle.metric]
