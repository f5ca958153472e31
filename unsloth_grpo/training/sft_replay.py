"""GRPO with an SFT term: each step's loss also fits a few worked examples (``training.sft_replay``).

GRPO changes the model only where a group's rewards differ. After a warm-up, the problems the model
already gets right form groups that all agree, so nothing in the loss holds on to them: on wordings the
training never uses, the smollm2 preset's GRPO stage drifts off additions it could do while it learns to
subtract (issue 52, docs/real_model.md). This module adds to every GRPO step the language-model loss of
a small batch of worked examples, those of the kinds the warm-up trained on (InstructGPT's "pretraining
mix", here with the warm-up's own data): ``loss = grpo_loss + weight * nll(examples)``.

The examples are the task's own (:meth:`unsloth_grpo.tasks.Task.sft_examples`), kept to the kinds the SFT
stages before this one kept (``warmup_categories``), so a warm-up of additions only replays additions and
the replay teaches nothing GRPO is meant to learn from the checker. The loss is the mean over the
completion's tokens (the prompt's are not fitted), as TRL's SFTTrainer computes it for prompt/completion
data. It is logged as ``sft_replay/loss`` beside TRL's metrics.

Example::

    trainer = GRPOTrainer(...)
    attach(trainer, replay_batches(rows, tokenizer), weight=0.5)
"""

from __future__ import annotations

import os
import random
from typing import Any, Callable

#: Worked examples in the replay pool (the first ones of the task's stream: a warm-up of up to this many
#: examples replays its own problems).
POOL = 256


def replay_examples(cfg, warmup_categories: list[str] | None):
    """The task's worked examples for the replay of ``cfg`` (a GRPO stage or run): ``POOL`` of them, of the
    kinds ``warmup_categories`` names (when None, those ``cfg.data`` keeps). Raises the task's DataError when it
    has none."""
    import dataclasses

    from unsloth_grpo.tasks import get_task

    data = dataclasses.replace(cfg.data, categories=list(warmup_categories)) if warmup_categories else cfg.data
    return get_task(cfg.task).sft_examples(dataclasses.replace(cfg, data=data), POOL)


def tokenize(rows, tokenizer) -> list[tuple[list[int], int]]:
    """Each prompt/completion chat pair as (token ids of the whole conversation, tokens of the prompt),
    written by the tokenizer's chat template as generation sees it
    (:func:`~unsloth_grpo.evaluation.generation.render_prompts`)."""
    from unsloth_grpo.evaluation.generation import render_prompts

    out = []
    for row in rows:
        [prompt] = render_prompts(tokenizer, [row["prompt"]])
        whole = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        if not whole.startswith(prompt):  # a template that writes the turn otherwise: the completion's text
            whole = prompt + row["completion"][-1]["content"] + (tokenizer.eos_token or "")
        ids = tokenizer(whole, add_special_tokens=False)["input_ids"]
        n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        if n_prompt < len(ids):
            out.append((ids, n_prompt))
    return out


def nll(model, examples: list[tuple[list[int], int]], pad_id: int):
    """The mean negative log-likelihood of ``examples``' completion tokens under ``model`` (with gradients)."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    device = next(model.parameters()).device
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (row, n_prompt) in enumerate(examples):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
        labels[i, n_prompt:len(row)] = ids[i, n_prompt:len(row)]
    ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
    # Unsloth's GRPO asks its patched forwards for hidden states instead of logits through this variable
    saved = os.environ.get("UNSLOTH_RETURN_HIDDEN_STATES")
    os.environ["UNSLOTH_RETURN_HIDDEN_STATES"] = "0"
    try:
        logits = model(input_ids=ids, attention_mask=mask).logits
    finally:
        if saved is None:
            os.environ.pop("UNSLOTH_RETURN_HIDDEN_STATES", None)
        else:
            os.environ["UNSLOTH_RETURN_HIDDEN_STATES"] = saved
    vocab = model.get_output_embeddings().weight.shape[0]
    if logits.shape[-1] != vocab:
        raise RuntimeError(f"training.sft_replay: the model's forward returned {logits.shape[-1]} values per token, "
                           f"not its vocabulary's {vocab} logits; set training.sft_replay=0 on this backend")
    return torch.nn.functional.cross_entropy(logits[:, :-1].float().flatten(0, 1), labels[:, 1:].flatten(),
                                             ignore_index=-100)


class SftReplay:
    """The wrapper :func:`attach` installs on a trainer's ``compute_loss``; ``steps`` counts the batches it
    added, ``last`` is the latest replay loss."""

    def __init__(self, trainer, examples: list, *, weight: float, batch_size: int, seed: int) -> None:
        self.examples, self.weight, self.batch_size = examples, weight, batch_size
        self.order: list[int] = []
        self.rng = random.Random(seed)
        self.steps, self.last = 0, None
        self.pad_id = trainer.processing_class.pad_token_id
        if self.pad_id is None:
            self.pad_id = trainer.processing_class.eos_token_id or 0
        inner = trainer.compute_loss

        def compute_loss(model, inputs, *args, **kwargs):
            loss = inner(model, inputs, *args, **kwargs)
            replay = nll(model, self.next_batch(), self.pad_id)
            self.steps, self.last = self.steps + 1, float(replay.detach())
            metrics = getattr(trainer, "_metrics", None)
            if isinstance(metrics, dict) and "train" in metrics:
                metrics["train"]["sft_replay/loss"].append(self.last)
            return loss + self.weight * replay

        trainer.compute_loss = compute_loss

    def next_batch(self) -> list:
        """The next ``batch_size`` examples: the pool in a seeded order, reshuffled each time it is used up."""
        batch = []
        while len(batch) < min(self.batch_size, len(self.examples)):
            if not self.order:
                self.order = list(range(len(self.examples)))
                self.rng.shuffle(self.order)
            batch.append(self.examples[self.order.pop()])
        return batch


def attach(trainer, rows, *, weight: float, batch_size: int, seed: int,
           log: Callable[[str], None] | None = print) -> SftReplay:
    """Add ``weight`` times the SFT loss of ``batch_size`` of ``rows`` (prompt/completion chat pairs) to each
    of ``trainer``'s loss computations (``trainer.sft_replay``)."""
    examples = tokenize(rows, trainer.processing_class)
    if not examples:
        raise ValueError("training.sft_replay: the task gave no worked example with a completion to fit")
    trainer.sft_replay = SftReplay(trainer, examples, weight=weight, batch_size=batch_size, seed=seed)
    if log is not None:
        log(f"sft replay: {len(examples)} worked examples, {min(batch_size, len(examples))} a step, "
            f"weight {weight:g}")
    return trainer.sft_replay


__all__: list[Any] = ["POOL", "SftReplay", "attach", "nll", "replay_examples", "tokenize"]
