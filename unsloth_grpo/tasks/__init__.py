"""Task modules: each owns its data loader, answer extraction, rewards and evaluation.

A task module provides ``load_dataset_for(cfg)`` returning a dataset with ``prompt`` and
``answer`` columns, and ``DEFAULT_REWARDS``. A task whose final answer is one number also provides
``lenient_grader_for(cfg)``: evaluation's lenient reading (:func:`unsloth_grpo.answers.lenient`), which
counts the right number anywhere in the completion. It is never a reward. A task whose rows carry their
solution also provides ``gold_completion(row)``: that solution written as a correct completion, on
which every reward is tried before the model loads
(:func:`unsloth_grpo.training.checks.reward_trial_problems`).
"""

from __future__ import annotations

import pkgutil


def available_tasks() -> list[str]:
    """Names of the task modules shipped in this package."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def lenient_grader(task, cfg):
    """``task``'s lenient grader for ``cfg`` (evaluation only), or None when it has no lenient reading.

    Tasks whose answer is one number have one (gsm8k, arith, gsm8k_tools, custom in ``numeric``
    mode). Tasks whose answer is a structure have none: a countdown equation ends in its target
    whatever the equation, a JSON record or a program is not a number.
    """
    fn = getattr(task, "lenient_grader_for", None)
    return None if fn is None else fn(cfg)


def grader_from_rewards(cfg, names, default):
    """The grader of the recipe's correctness reward, built from that reward's own parameters.

    The first reward named in ``names`` among ``cfg.rewards`` (then the stages' rewards, the last
    stage first) is built as training builds it, and its ``.grader`` returned: the very function
    whose verdict the reward pays on, so evaluation cannot grade differently. ``default`` (a reward
    spec) is used when the recipe lists none of ``names``.
    """
    from unsloth_grpo.rewards import grader_of, reward_spec_fields

    specs = list(getattr(cfg, "rewards", None) or [])
    for stage in reversed(list(getattr(cfg, "stages", None) or [])):
        specs.extend(stage.rewards or [])
    for spec in [*specs, default]:
        name, params = reward_spec_fields(spec)
        if name in names:
            return grader_of(name, params)
    raise ValueError(f"no reward among {list(names)} to grade with")  # unreachable with a default in names


def reasoned_completion(answer: str, reasoning: str = "Worked out step by step.") -> str:
    """``answer`` as a completion in the reasoning-then-answer format the recipes ask for."""
    return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"
