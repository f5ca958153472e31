"""Evaluation: batched generation, graded evaluation and comparison, inference helpers, plots and
the reward lab (which generates with a model, so it lives here rather than in ``rewards``)."""
