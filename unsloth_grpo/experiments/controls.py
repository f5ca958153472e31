"""GRPO against its controls: does the reward raise accuracy, or just more training?

A two-stage config (``stages: [sft, grpo]``) is run once up to the end of its SFT stage; from
that same starting adapter three arms are trained and graded on the same held-out problems:

- ``grpo``: the GRPO stage as configured (the task's correctness reward);
- ``extra_sft``: as many further SFT steps as the GRPO stage has, on the SFT stage's examples,
  at its learning rate (more training, no reward);
- ``shuffled_grpo``: the GRPO stage with the gold answers permuted across prompts (the same
  amount of reinforcement, but the reward no longer says whether *this* answer is right).

Accuracy is greedy, graded by the task's own grader (the function its reward calls), with a
95% Wilson interval. ``benchmarks/accuracy_demo.py`` runs this over several seeds and prints
the table; the slow test asserts the margin.

Example::

    from unsloth_grpo.tasks.arith import RECIPE
    result = run_controls(RECIPE.resolve(output_dir="/tmp/arith-controls"))
    result["accuracy"]   # {"sft": 0.31, "grpo": 0.45, "extra_sft": 0.30, "shuffled_grpo": 0.28}
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.config import ConfigError, RecipeConfig
from unsloth_grpo.evaluation.evaluate import evaluate_task, wilson_interval

#: The arms trained from the SFT start, in table order.
ARMS = ("grpo", "extra_sft", "shuffled_grpo")


def shuffled_gold(dataset, seed: int = 0, column: str = "answer"):
    """The same rows with ``column`` permuted across rows: every prompt keeps *a* gold answer of the
    right kind, but not its own, so a correctness reward turns into noise about this answer."""
    answers = list(dataset[column])
    random.Random(f"shuffle-{seed}").shuffle(answers)
    return dataset.remove_columns(column).add_column(column, answers)


def check_two_stage(cfg: RecipeConfig) -> None:
    """The controls need exactly ``stages: [sft, grpo]``; say so before any model is loaded."""
    kinds = [s.kind for s in cfg.stages]
    if kinds != ["sft", "grpo"]:
        raise ConfigError(f"the controls need stages [sft, grpo]; this config has {kinds or 'no stages'}. "
                          "Use the arith recipe (recipes/arith.yaml) or give the config those two stages")


def _graded(task, cfg: RecipeConfig, loaded, held_out) -> dict[str, Any]:
    """Greedy accuracy on ``held_out`` with the task's grader, plus its interval."""
    e = cfg.evaluation
    t0 = time.perf_counter()
    result = evaluate_task(task, loaded.model, loaded.tokenizer, held_out, cfg, seed=cfg.seed,
                           batch_size=e.batch_size, max_new_tokens=e.max_new_tokens or cfg.training.max_completion_length)
    correct = sum(r["correct"] for r in result["records"])
    low, high = wilson_interval(correct, result["n"])
    lenient = result.get("lenient_accuracy")
    lenient_correct = None if lenient is None else sum(r["lenient_correct"] for r in result["records"])
    return {"accuracy": result["accuracy"], "correct": correct, "n": result["n"], "ci95": [low, high],
            "lenient_accuracy": lenient, "lenient_correct": lenient_correct,
            "format_compliance": result["format_compliance"], "eval_seconds": round(time.perf_counter() - t0, 2),
            "examples": [r["completion"] for r in result["records"][:3]]}


def _accuracies(graded: dict[str, Any]) -> str:
    """``0.412 (lenient 0.530)``: strict accuracy, and lenient beside it when the task has it."""
    lenient = graded.get("lenient_accuracy")
    return f"{graded['accuracy']:.3f}" + ("" if lenient is None else f" (lenient {lenient:.3f})")


@dataclasses.dataclass
class SftStart:
    """One seed's trained SFT stage: the adapter every arm starts from, and what the arms share."""

    cfg: RecipeConfig  # the two-stage config
    grpo_cfg: RecipeConfig  # its GRPO stage as a single-stage config
    sft_cfg: RecipeConfig
    task: Any  # the task (unsloth_grpo.tasks.Task)
    loaded: Any  # the model, with the SFT adapter trained
    state: dict  # the LoRA weights after SFT (restore with set_peft_model_state_dict)
    held_out: Any
    train_rows: Any  # the GRPO stage's training rows
    seconds: float  # SFT training time
    graded: dict[str, Any]  # the SFT adapter's held-out evaluation (see _graded)

    def sub(self, scfg: RecipeConfig, name: str, **training) -> RecipeConfig:
        """``scfg`` writing under ``cfg.output_dir/name``, with ``training`` keys replaced (the toolkit's
        own options by field, TRL's in ``trl``)."""
        return dataclasses.replace(scfg, output_dir=str(Path(self.cfg.output_dir) / name),
                                   training=scfg.training.updated(**training))

    def reset(self) -> None:
        """Put the SFT adapter back, for the next arm."""
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.loaded.model, self.state)
        self.loaded.trained_in = None  # the adapter is the SFT start again: the next arm trains from it


def train_sft_start(cfg: RecipeConfig, *, log: Callable[[str], None] = print) -> SftStart:
    """Check ``cfg`` (stages [sft, grpo]), load the model, train the SFT stage once and grade it."""
    from unsloth_grpo.config import check
    from unsloth_grpo.hardware.backend import load_model, prepare_backend
    from unsloth_grpo.tasks import get_task
    from unsloth_grpo.training.stages import lora_state, stage_config, train_sft
    from unsloth_grpo.training.held_out import held_out_rows, load_task_dataset

    check_two_stage(cfg)
    check(cfg)
    task = get_task(cfg.task)
    sft_cfg, grpo_cfg = stage_config(cfg, 1), stage_config(cfg, 2)
    held_out = held_out_rows(cfg)
    train_rows = load_task_dataset(grpo_cfg)  # bad data fails here, before the model
    decision = prepare_backend(sft_cfg.model)  # decided once, Unsloth imported first when it is the backend
    loaded = load_model(sft_cfg.model, sft_cfg.lora, seed=cfg.seed, decision=decision,
                        gradient_checkpointing=sft_cfg.training.gradient_checkpointing, log=log)
    start = SftStart(cfg, grpo_cfg, sft_cfg, task, loaded, {}, held_out, train_rows, 0.0, {})
    t0 = time.perf_counter()
    quiet = lambda msg: None  # noqa: E731 - the stage logs are long; the caller prints a summary
    train_sft(start.sub(sft_cfg, "sft"), loaded, num_examples=cfg.stages[0].num_examples, log=quiet)
    start.seconds = round(time.perf_counter() - t0, 1)
    start.graded = _graded(task, cfg, loaded, held_out)
    start.state = lora_state(loaded.model)
    return start


def run_controls(cfg: RecipeConfig, *, arms: tuple[str, ...] = ARMS, log: Callable[[str], None] = print,
                 keep_outputs: bool = False) -> dict[str, Any]:
    """Train the SFT start once, then each of ``arms`` from it; return held-out accuracy per arm.

    The result holds ``accuracy`` (arm -> share correct under the task's strict grader, with ``"sft"``
    for the start), ``lenient_accuracy`` (the same, read leniently; None for a task without it), ``evals``
    (arm -> correct, n, ci95, format compliance), ``seconds`` (arm -> training wall time) and
    ``grpo_reward`` (arm -> mean training reward over its first and last 5 steps). Stage
    outputs go under ``cfg.output_dir`` and are removed at the end unless ``keep_outputs``.
    """
    from unsloth_grpo.training.stages import train_sft
    from unsloth_grpo.training.train import train

    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm(s) {', '.join(unknown)}; choose from: {', '.join(ARMS)}")
    start = train_sft_start(cfg, log=log)
    sft_stage, grpo_stage = cfg.stages
    out = Path(cfg.output_dir)
    seconds = {"sft": start.seconds}
    evals = {"sft": start.graded}
    quiet = lambda msg: None  # noqa: E731 - the stage logs are long; the arm summary is printed below
    log(f"seed {cfg.seed} sft: accuracy {_accuracies(evals['sft'])} ({seconds['sft']:.0f}s)")
    task, loaded, held_out = start.task, start.loaded, start.held_out
    rewards: dict[str, list[float]] = {}
    for arm in arms:
        start.reset()
        t0 = time.perf_counter()
        if arm == "extra_sft":
            # the SFT stage continued for as many steps as GRPO takes, on the same examples
            arm_cfg = start.sub(start.sft_cfg, arm, max_steps=grpo_stage.max_steps)
            train_sft(arm_cfg, loaded, num_examples=sft_stage.num_examples, log=quiet)
        else:
            rows = shuffled_gold(start.train_rows, seed=cfg.seed) if arm == "shuffled_grpo" else start.train_rows
            result = train(start.sub(start.grpo_cfg, arm), loaded=loaded, dataset=rows, log=quiet)
            rewards[arm] = [result.mean_reward(first=5), result.mean_reward(last=5)]
        seconds[arm] = round(time.perf_counter() - t0, 1)
        evals[arm] = _graded(task, cfg, loaded, held_out)
        log(f"seed {cfg.seed} {arm}: accuracy {_accuracies(evals[arm])} ({seconds[arm]:.0f}s)"
            + (f", train reward {rewards[arm][0]:.3f} -> {rewards[arm][1]:.3f}" if arm in rewards else ""))
    if not keep_outputs:
        for name in ("sft", *arms):
            shutil.rmtree(out / name, ignore_errors=True)
    return {"seed": cfg.seed, "accuracy": {k: v["accuracy"] for k, v in evals.items()},
            "lenient_accuracy": {k: v["lenient_accuracy"] for k, v in evals.items()}, "evals": evals,
            "seconds": seconds, "grpo_reward": rewards}


__all__ = ["ARMS", "SftStart", "check_two_stage", "run_controls", "shuffled_gold", "train_sft_start", "wilson_interval"]
