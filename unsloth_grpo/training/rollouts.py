"""Do the rollouts come from the weights being trained? A direct check in the first generation rounds.

GRPO's gradient assumes that each completion was sampled from the policy being trained. When the
generator does not see the adapter (Unsloth's vLLM rollouts with TRL >= 1.10 once came from the
base model, ignoring the LoRA, while the losses looked normal; a vLLM engine left with stale
weights after sleep/wake does the same) nothing in the logged losses shows it.

The check scores the completions of a generation round under the model being trained twice, with
the LoRA adapter on and off, through the trainer's own scoring function
(``_get_per_token_logps_and_entropies``, so temperature and Unsloth's fast path apply as in
training). For a completion ``x`` sampled from a policy ``p``, the log-likelihood ratio
``log on(x) - log off(x)`` has expectation ``KL(on || off) >= 0`` when ``p`` is the adapted policy
and ``-KL(off || on) <= 0`` when ``p`` ignores the adapter; its mean over the round's completions,
in units of its standard error, tells which one generated them. When the generator's own
log-probabilities are in the batch (TRL with vLLM and importance-sampling correction), the
distance of each scoring to them decides instead. Before the adapter has moved (its B matrices
start at zero) both scorings agree and the round is undecided; the check tries the next rounds, up
to ``max_rounds``, and stops at the first verdict.

A verdict against the trained weights becomes the health warning ``stale_rollouts`` (printed and
written to ``health.jsonl`` by :mod:`unsloth_grpo.training.monitor`); each checked round also logs
``rollouts/adapter_logp_gain`` (the mean log-ratio per completion token) beside TRL's metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from unsloth_grpo.training.monitor import HealthWarning

NAME = "stale_rollouts"
FIX = ("Rollouts must use the trained adapter: update unsloth and unsloth_zoo (a bug with TRL >= 1.10 generated "
       "Unsloth's vLLM rollouts from the base model), or set model.fast_inference=off to generate with the "
       "trained model itself; report the versions in run_info.json if it persists.")


@dataclass
class Verdict:
    """One round's answer: ``from_trained`` True/False, or None when the round cannot tell."""

    from_trained: bool | None
    how: str
    values: dict[str, Any]


def judge(on, off, mask, generator=None, *, min_z: float = 4.0, min_gap: float = 1e-4) -> Verdict:
    """Decide from per-token log-probabilities (``[sequences, tokens]`` tensors) which policy sampled.

    ``on``/``off``: the completions scored with the adapter on and off; ``mask``: which tokens count;
    ``generator``: the sampler's own log-probabilities, when known (NaN where it could not score).
    ``min_gap``: the smallest mean per-token difference between the two scorings that can decide.
    """
    import torch

    mask = mask.bool()
    diff = (on - off).float().masked_fill(~mask, 0.0)
    tokens = int(mask.sum())
    gap = float(diff.abs().sum()) / max(tokens, 1)
    values: dict[str, Any] = {"completions": int(on.shape[0]), "tokens": tokens, "onoff_gap_per_token": gap}
    if tokens == 0 or gap < min_gap:
        return Verdict(None, "the adapter has not moved the policy yet", values)
    if generator is not None:
        known = mask & torch.isfinite(generator)
        if int(known.sum()) > 0:
            d_on = float((generator - on).abs()[known].mean())
            d_off = float((generator - off).abs()[known].mean())
            values.update(generator_distance_adapter_on=d_on, generator_distance_adapter_off=d_off)
            # decided only when the two scorings are further apart than the sampler's own noise
            if abs(d_on - d_off) > 0.5 * gap:
                return Verdict(d_on < d_off, "the generator's log-probabilities", values)
    per_seq = diff.sum(dim=1)
    n = per_seq.numel()
    gain = float(per_seq.sum()) / tokens
    values["adapter_logp_gain_per_token"] = gain
    if n < 2:
        return Verdict(None, "one completion", values)
    sd = float(per_seq.std())
    if sd == 0.0 or math.isnan(sd):
        return Verdict(None, "no spread between completions", values)
    z = float(per_seq.mean()) / (sd / math.sqrt(n))
    values["z"] = z
    if z >= min_z:
        return Verdict(True, "the completions are likelier with the adapter on", values)
    if z <= -min_z:
        return Verdict(False, "the completions are likelier with the adapter off", values)
    return Verdict(None, f"not yet significant (z={z:.2f})", values)


class RolloutCheck:
    """Wraps the trainer's generation (``_generate_and_score_completions``) and judges its first rounds.

    ``report(warning)`` receives the ``stale_rollouts`` warning; ``log`` one line per verdict.
    """

    def __init__(self, trainer, report: Callable[[HealthWarning], None], *, log: Callable[[str], None] = print,
                 max_rounds: int = 8, max_sequences: int = 16, min_z: float = 4.0) -> None:
        self.trainer, self.report, self.log = trainer, report, log
        self.max_rounds, self.max_sequences, self.min_z = max_rounds, max_sequences, min_z
        self.rounds = 0
        self.verdict: Verdict | None = None
        self.done = False

    def install(self) -> "RolloutCheck":
        original = self.trainer._generate_and_score_completions

        def generate_and_check(*args, **kwargs):
            out = original(*args, **kwargs)
            if not self.done:
                try:
                    self._check(out)
                except Exception as exc:  # noqa: BLE001 - a check must never stop the training it watches
                    self.done = True
                    self.log(f"rollout check: skipped ({type(exc).__name__}: {exc})")
            return out

        self.trainer._generate_and_score_completions = generate_and_check
        return self

    def _model(self):
        model = self.trainer.model
        return model if hasattr(model, "disable_adapter") else None

    def _check(self, out: dict) -> None:
        import torch

        model = self._model()
        if model is None:  # full fine-tuning: no adapter to switch off
            self.done = True
            return
        self.rounds += 1
        n = min(int(out["completion_ids"].shape[0]), self.max_sequences)
        prompt_ids, prompt_mask = out["prompt_ids"][:n], out["prompt_mask"][:n]
        completion_ids, completion_mask = out["completion_ids"][:n], out["completion_mask"][:n]
        mask = completion_mask if out.get("tool_mask") is None else completion_mask * out["tool_mask"][:n]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        keep = completion_ids.shape[1]
        score = self.trainer._get_per_token_logps_and_entropies
        with torch.no_grad():
            on = score(model, input_ids, attention_mask, keep, batch_size=n)[0]
            with model.disable_adapter():
                off = score(model, input_ids, attention_mask, keep, batch_size=n)[0]
        generator = out.get("sampling_per_token_logps")
        generator = None if generator is None else generator[:n]
        on, off, mask, generator = self._across_processes(on, off, mask, generator)
        verdict = judge(on, off, mask, generator, min_z=self.min_z)
        step = int(self.trainer.state.global_step) + 1  # the step these completions train
        self._log_metric(verdict)
        if verdict.from_trained is None:
            if self.rounds >= self.max_rounds:
                self.done = True
                self.log(f"rollout check: undecided after {self.rounds} generation rounds ({verdict.how})")
            return
        self.done, self.verdict = True, verdict
        if verdict.from_trained:
            self.log(f"rollout check: the completions of step {step} come from the weights being trained "
                     f"({verdict.how})")
            return
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in verdict.values.items()}
        self.report(HealthWarning(
            step=step, name=NAME,
            message=(f"the completions of step {step} were not sampled from the weights being trained: "
                     f"{verdict.how} ({shown}). The policy gradient then trains on samples the policy does "
                     "not produce, while the loss looks normal."),
            fix=FIX, values=verdict.values))

    def _across_processes(self, on, off, mask, generator):
        """Every rank's scorings together, so that all ranks judge the same completions: they then log
        the same ``rollouts/adapter_logp_gain`` and stop checking at the same round (a rank that kept
        checking alone would wait forever in the next gather)."""
        accelerator = getattr(self.trainer, "accelerator", None)
        if accelerator is None or getattr(accelerator, "num_processes", 1) <= 1:
            return on, off, mask, generator

        def together(t, pad):
            t = accelerator.pad_across_processes(t.contiguous(), dim=1, pad_index=pad)
            return accelerator.gather(t)

        on, off = together(on, 0.0), together(off, 0.0)
        mask = together(mask.to(on.dtype), 0.0)  # padded tokens count for nothing
        if generator is not None:
            generator = together(generator.to(on.dtype), float("nan"))
        return on, off, mask, generator

    def _log_metric(self, verdict: Verdict) -> None:
        gain = verdict.values.get("adapter_logp_gain_per_token")
        metrics = getattr(self.trainer, "_metrics", None)
        if gain is None or not isinstance(metrics, dict):
            return
        try:
            metrics["train"]["rollouts/adapter_logp_gain"].append(gain)
        except (KeyError, TypeError, AttributeError):
            pass


def watch_rollouts(trainer, health_callback, *, log: Callable[[str], None] = print, **kwargs) -> RolloutCheck | None:
    """Install :class:`RolloutCheck` on ``trainer``, reporting through the health monitor's callback
    (:func:`unsloth_grpo.training.monitor.make_health_callback`). None when its thresholds ignore
    ``stale_rollouts``."""
    if NAME in health_callback.checker.t.ignore:
        return None
    return RolloutCheck(trainer, health_callback.report, log=log, **kwargs).install()
