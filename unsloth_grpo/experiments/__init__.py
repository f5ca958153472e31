"""Experiments: runs that test a claim about training rather than train a model for use.

:mod:`unsloth_grpo.experiments.controls` trains GRPO beside its controls (more SFT, GRPO on shuffled
gold answers) from one SFT start, to show whether the reward raises accuracy or only more training
does; ``benchmarks/accuracy_demo.py`` and ``benchmarks/learning_efficiency.py`` run it over seeds.
"""
