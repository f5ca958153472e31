"""A GRPO step with nothing to learn leaves the model as it was (``training.skip_flat_steps``).

When every group of a step scored alike (all right, or all wrong), its advantages are zero, and with no KL
term (``beta`` 0) and no other loss (``training.sft_replay`` 0) every gradient of the step is exactly zero.
The Trainer still calls the optimizer, and Adam does not stand still on a zero gradient: its first moment
still holds the earlier steps' direction, so the weights move by about one ordinary step along it (less a
tenth each such step), and AdamW's weight decay shrinks them. Dynamic sampling's refill leaves such steps
when none of its rounds found an informative group: on the smollm2 preset 4-13 of each seed's 30 GRPO steps
(docs/real_model.md), each one an update the reward never asked for.

With the option on, an optimizer step whose gradients are all exactly zero is handed no gradients at all
(each is set to ``None`` just before the step). PyTorch's optimizers pass over a parameter without a
gradient, so the weights, Adam's moments and its step count stay as they were; the learning-rate schedule
and the Trainer's step count go on as usual. Any non-zero gradient (a KL term, an SFT replay, one
informative group) and the step runs unchanged. The step's ``flat_steps/skipped`` (1 or 0) is logged with
the step's other metrics.

Not applied (the run says so once): under DeepSpeed, whose engine owns the gradients, and with fp16's loss
scaler when gradients are not clipped (``max_grad_norm`` 0), where the scaler needs gradients to check.

Example::

    trainer = GRPOTrainer(...)
    attach(trainer)
    trainer.train()
"""

from __future__ import annotations

from typing import Callable

from transformers import TrainerCallback


class SkipFlatSteps(TrainerCallback):
    """Before each optimizer step: no gradient but zeros, no update (see the module docstring)."""

    def __init__(self, trainer, log: Callable[[str], None] | None = None) -> None:
        self.trainer, self.log = trainer, log
        self.skipped = 0
        self.reason = _why_not(trainer)
        if self.reason and log is not None:
            log(f"skip_flat_steps: off for this run ({self.reason})")

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        if self.reason or optimizer is None:
            return control
        import torch

        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        # one device sync a step: the largest magnitude of each gradient, together (NaN counts as not flat)
        flat = bool(grads) and not bool(torch.stack([g.detach().abs().amax().to(grads[0].device)
                                                     for g in grads]).any())
        if flat:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            self.skipped += 1
        metrics = getattr(self.trainer, "_metrics", None)
        if isinstance(metrics, dict) and "train" in metrics:
            metrics["train"]["flat_steps/skipped"].append(float(flat))
        return control


def _why_not(trainer) -> str | None:
    acc = getattr(trainer, "accelerator", None)
    if acc is None:
        return None
    if str(getattr(acc, "distributed_type", "")).upper().endswith("DEEPSPEED"):
        return "DeepSpeed owns the gradients"
    if getattr(acc, "scaler", None) is not None and not trainer.args.max_grad_norm > 0:
        return "fp16's loss scaler checks the gradients when max_grad_norm is 0"
    return None


def attach(trainer, log: Callable[[str], None] | None = None) -> SkipFlatSteps:
    """Give ``trainer`` (a transformers ``Trainer``, TRL's GRPOTrainer) the rule; returns the callback, whose
    ``skipped`` counts the steps it left out."""
    callback = SkipFlatSteps(trainer, log=log)
    trainer.add_callback(callback)
    return callback


__all__ = ["SkipFlatSteps", "attach"]
