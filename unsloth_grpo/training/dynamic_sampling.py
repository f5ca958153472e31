"""Dynamic sampling: no optimizer step spent on groups that teach nothing (DAPO's rule).

GRPO learns only from groups whose rewards differ. When every completion of a prompt scores the
same, the group's advantages are all zero: it cost its generation and will cost its backward pass,
and under the token-level loss (``dapo``) its tokens still count in the normaliser, so they dilute
the step. TRL 1.14 has no option for this; :func:`attach` adds one to a built ``GRPOTrainer``.

Modes (``training.dynamic_sampling``):

``off``
    TRL's behaviour: every group is trained on.
``drop``
    Groups whose rewards all agree are removed from the generation batch before the loss; the step
    trains on the rest. No extra generation, and a shorter backward pass.
``refill``
    DAPO's dynamic sampling: drop those groups, then generate for further prompts and keep their
    informative groups, until the batch holds as many informative groups as it was configured for
    or ``training.max_sampling_rounds`` generation rounds have run (the first round included).
    Informative groups beyond the batch size are discarded, as DAPO does.

Whatever the mode leaves short of a full batch is trained as it is (a smaller batch); when no group
of the first round is informative and no refill found one, the step runs on TRL's batch unchanged
(its advantages are all zero, as without this option). A batch holding inputs it cannot regroup
(a multimodal model's image tensors) switches the option off for the run, with one log line; under
``refill`` a streamed training set (no index to draw from) makes it ``drop``.

How it works. Two of the trainer's methods are wrapped on the instance, nothing is subclassed:
``_calculate_rewards`` (to see the rewards of every completion on every process, the tensor TRL
gathers to normalise per group) and ``_generate_and_score_completions`` (which returns the
generation batch TRL then splits into ``steps_per_generation`` micro-batches, so dynamic sampling
works with ``steps_per_generation > 1`` unchanged). After each round the batch is gathered from all
processes, groups are chosen by the same rule everywhere, and each process takes its equal share of
the chosen rows: the global batch is the same on every rank. Refill prompts are drawn from the
training set by a generator seeded with (seed, global step, generation in that step, round), so a run
resumed from a checkpoint draws exactly what the uninterrupted run drew.

Each generation logs ``dynamic_sampling/rounds``, ``.../groups_dropped`` (zero-variance groups seen in
all its rounds), ``.../groups_kept`` (informative groups trained on), ``.../prompts`` (prompts generated
for) and ``.../generated_tokens`` (completion tokens generated, all rounds).

The logged reward. TRL logs ``reward`` and ``rewards/<name>/mean`` once per generation call, so a refilled
step would log the mean over its rounds. That mean is not the policy's reward: how many rounds ran depends
on the rewards (a step stops at the round that completes its informative groups), so the rounds that end a
step are over-weighted. On a task whose easy half is always right and whose hard half the model is
learning, the over-weighted round is the hard, mixed one, and the mean over rounds can fall while the
model improves (measured: docs/real_model.md). Under ``refill`` those keys get
:func:`first_round_reward` instead, which has the expected value of the first round's reward, the batch
TRL's sampler drew before any round was chosen by its outcome, so it estimates what ``off`` would log; the
mean over rounds stays in ``dynamic_sampling/all_rounds/reward`` (and ``.../all_rounds/rewards/<name>/mean``).

Example::

    trainer = GRPOTrainer(...)
    attach(trainer, "refill", max_rounds=3)
    trainer.train()
"""

from __future__ import annotations

import random
from typing import Any

#: The values of ``training.dynamic_sampling``.
MODES = ("off", "drop", "refill")

#: Output keys laid out as (rows, prompt tokens), left-padded; and their padding value.
_PROMPT_KEYS = {"prompt_ids": "pad", "prompt_mask": 0}
#: Output keys laid out as (rows, completion tokens), right-padded; and their padding value.
_COMPLETION_KEYS = {"completion_ids": "pad", "completion_mask": 0, "tool_mask": 1, "old_per_token_logps": 0.0,
                    "sampling_per_token_logps": 0.0, "ref_per_token_logps": 0.0, "importance_sampling_ratio": 0.0}
_ROW_KEYS = {"advantages"}
_KNOWN = set(_PROMPT_KEYS) | set(_COMPLETION_KEYS) | _ROW_KEYS | {"num_items_in_batch"}


class DynamicSamplingError(RuntimeError):
    """A trainer this option cannot wrap (one without TRL's GRPOTrainer methods)."""


def attach(trainer, mode: str, *, max_rounds: int = 3, log=None) -> "DynamicSampler | None":
    """Give ``trainer`` (TRL's ``GRPOTrainer`` or a class built from it) dynamic sampling in ``mode``.

    Returns the :class:`DynamicSampler` (None for ``off``, which leaves the trainer untouched).
    """
    if mode not in MODES:
        raise ValueError(f"dynamic_sampling={mode!r}: choose one of {', '.join(MODES)}")
    if mode == "off":
        return None
    return DynamicSampler(trainer, mode, max_rounds=max_rounds, log=log)


def agreeing_groups(rewards_per_func, weights, num_generations: int, aggregation: str = "sum_then_normalize"):
    """Bool tensor, one entry per group of ``num_generations`` consecutive rows: True when the group's
    rewards all agree, so its advantages are zero (TRL's ``frac_reward_zero_std`` counts these).

    ``rewards_per_func`` is (rows, reward functions) with NaN where a function did not apply.
    Summed rewards are compared (TRL's default aggregation); with ``normalize_then_sum`` each
    function on its own. A group with fewer than two scorable completions counts as agreeing.
    """
    import torch

    if aggregation == "sum_then_normalize":
        values = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        values[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        values = values.view(-1, num_generations, 1)
    else:
        values = rewards_per_func.view(-1, num_generations, rewards_per_func.shape[1])
    scored = ~torch.isnan(values)
    count = scored.sum(dim=1)
    mean = torch.where(scored, values, 0.0).sum(dim=1) / count.clamp(min=1)
    spread = torch.where(scored, (values - mean.unsqueeze(1)).abs(), 0.0).amax(dim=1)
    flat = (spread <= 1e-6 * (1.0 + mean.abs())) | (count < 2)
    return flat.all(dim=1)


def first_round_reward(values, mixed, target: int) -> float:
    """An estimate of a step's reward with the expected value of its first round's, using every round.

    ``values`` holds each round's mean reward, ``mixed`` each round's count of informative groups, in order;
    the step stopped after the round that brought the count to ``target`` (or at its last allowed round).
    Rounds are draws of the same kind (prompts picked without regard to their outcome), so the first
    round's expectation is the policy's reward; which round came first is known only up to the orders the
    stopping rule allows. This averages the first round's value over those orders (a Rao-Blackwell step):

    - one round: its value;
    - the rounds ran out short of ``target``: any order was possible, so the mean of all rounds;
    - otherwise the last round was one whose informative groups completed the count (``total - mixed[L] <
      target``); for each such round L, the mean of the others; then the mean over those L.

    With one group a round this is the mean of the rounds before the one that ended the step, or that
    round alone when it was the first. The plain mean over rounds over-weights the round that ended it.
    """
    import math

    values = [float(v) for v in values]
    if len(values) != len(mixed) or not values:
        raise ValueError(f"first_round_reward: {len(values)} values and {len(mixed)} counts; one each a round")
    if len(values) == 1:
        return values[0]

    def mean(xs):
        xs = [x for x in xs if not math.isnan(x)]
        return sum(xs) / len(xs) if xs else float("nan")

    total = sum(mixed)
    if total < target:
        return mean(values)
    last = [i for i in range(len(values)) if total - mixed[i] < target]
    return mean([mean(values[:i] + values[i + 1:]) for i in last])


class DynamicSampler:
    """The wrapped generation of one trainer; see the module docstring."""

    def __init__(self, trainer, mode: str, *, max_rounds: int, log=None) -> None:
        if mode not in ("drop", "refill"):
            raise ValueError(f"DynamicSampler mode {mode!r}: 'drop' or 'refill'")
        if max_rounds < 1:
            raise ValueError(f"max_sampling_rounds={max_rounds}: use an integer >= 1 (the first round counts)")
        for name in ("_generate_and_score_completions", "_calculate_rewards", "num_generations", "accelerator"):
            if not hasattr(trainer, name):
                raise DynamicSamplingError(f"dynamic sampling needs TRL's GRPOTrainer; {type(trainer).__name__} has "
                                           f"no {name}. Set training.dynamic_sampling: off")
        self.trainer, self.mode = trainer, mode
        self.log = log
        self.disabled = False
        data = getattr(trainer, "train_dataset", None)
        if mode == "refill" and not (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
            # refill draws further prompts by index; a streamed dataset has none
            self._say("dynamic sampling: refill needs a map-style training set (prompts drawn by index); "
                      "this run drops flat groups without refilling (drop)")
            self.mode = mode = "drop"
        self.max_rounds = max_rounds if mode == "refill" else 1
        self._generate = trainer._generate_and_score_completions
        self._rewards_of = trainer._calculate_rewards
        self._last_rewards = None
        self._last_tokens = 0
        self._where = (-1, 0)  # (global step, generations so far in it): names each generation
        trainer._calculate_rewards = self._calculate_rewards
        trainer._generate_and_score_completions = self.generate_and_score
        trainer.dynamic_sampler = self

    # ------------------------------------------------------------------ wrapped methods
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = self._rewards_of(inputs, prompts, completions, completion_ids_list)
        self._last_rewards = rewards  # (global rows, functions): TRL gathers it from every process
        self._last_tokens = sum(len(ids) for ids in completion_ids_list)
        return rewards

    def generate_and_score(self, inputs):
        t = self.trainer
        if not t.model.training or self.disabled:  # evaluation batches are scored as TRL scores them
            return self._generate(inputs)
        step = t.state.global_step
        self._where = (step, self._where[1] + 1 if self._where[0] == step else 0)
        G = t.num_generations
        world = t.accelerator.num_processes
        target = len(inputs) * world // G  # groups in the configured generation batch
        rounds, kept, dropped, prompts, tokens, mixed = [], [], [], 0, 0, []
        for r in range(self.max_rounds):
            batch = inputs if r == 0 else self._refill_rows(r, target, len(inputs))
            out = self._generate(batch)
            unknown = sorted(k for k, v in out.items() if k not in _KNOWN and v is not None)
            if unknown:  # images or other per-sample inputs this cannot regroup: TRL's batch, from now on
                self.disabled = True
                self._say(f"dynamic sampling: off for this run (its batches hold {', '.join(unknown)}, which it "
                          "cannot regroup)")
                return out
            agree = agreeing_groups(self._last_rewards, t.reward_weights, G,
                                    getattr(t, "multi_objective_aggregation", "sum_then_normalize")).tolist()
            prompts += target
            tokens += self._global_sum(self._last_tokens)
            rounds.append(out)
            for g, flat in enumerate(agree):
                (dropped if flat else kept).append((r, g))
            mixed.append(agree.count(False))
            if len(kept) >= target:
                break
        chosen = kept[:target]
        self._record(rounds=len(rounds), dropped=len(dropped), kept=len(chosen), prompts=prompts, tokens=tokens)
        if self.mode == "refill":  # drop runs one round: TRL's reward is already the first round's
            self._record_reward(mixed, target)
        if not chosen:
            return rounds[0]  # nothing to learn from anywhere: TRL's batch as it was (zero advantages)
        if len(rounds) == 1 and len(chosen) == target:
            return rounds[0]  # every group of the first round is informative
        return self._assemble(rounds, chosen, dropped, G)

    # ------------------------------------------------------------------ pieces
    def _refill_rows(self, round_index: int, prompts: int, local_rows: int) -> list[dict[str, Any]]:
        """This process's rows of a refill round: ``prompts`` prompts drawn from the training set, each
        repeated ``num_generations`` times, split across processes as TRL's sampler splits a batch."""
        t = self.trainer
        data = t.train_dataset
        rng = random.Random(f"dynamic-sampling-{t.args.seed}-{self._where[0]}-{self._where[1]}-{round_index}")
        n = len(data)
        picks = rng.sample(range(n), prompts) if prompts <= n else [rng.randrange(n) for _ in range(prompts)]
        rows = [i for i in picks for _ in range(t.num_generations)]
        start = t.accelerator.process_index * local_rows
        return [dict(data[i]) for i in rows[start:start + local_rows]]

    def _global_sum(self, value: int) -> int:
        import torch

        acc = self.trainer.accelerator
        if acc.num_processes == 1:
            return int(value)
        return int(acc.gather(torch.tensor([value], device=acc.device)).sum().item())

    def _say(self, message: str) -> None:
        if self.log is not None and self.trainer.accelerator.is_main_process:
            self.log(message)

    def _layout(self, key: str, tensor) -> str:
        """``prompt`` (left-padded tokens), ``completion`` (right-padded tokens) or ``row`` (one value a row)."""
        if key in _PROMPT_KEYS:
            return "prompt"
        sequence_ratio = key == "importance_sampling_ratio" and str(
            getattr(self.trainer, "vllm_importance_sampling_mode", "")).startswith("sequence")
        if key in _COMPLETION_KEYS and tensor.dim() == 2 and not sequence_ratio:
            return "completion"
        return "row"

    def _fill(self, key: str):
        value = _PROMPT_KEYS.get(key, _COMPLETION_KEYS.get(key, 0))
        return _pad_id(self.trainer) if value == "pad" else value

    def _gathered(self, out: dict[str, Any]) -> dict[str, Any]:
        """Every process's rows of ``out``, in process order (as TRL orders the global batch)."""
        acc = self.trainer.accelerator
        full = {}
        for key, value in out.items():
            if value is None or key == "num_items_in_batch":
                continue
            if acc.num_processes > 1:
                layout = self._layout(key, value)
                if layout != "row":
                    value = acc.pad_across_processes(value, dim=1, pad_index=self._fill(key),
                                                     pad_first=layout == "prompt")
                value = acc.gather(value)
            full[key] = value
        return full

    def _assemble(self, rounds: list[dict[str, Any]], chosen, dropped, G: int) -> dict[str, Any]:
        """The chosen groups of every round as one batch; this process's share of its rows."""
        import torch

        t = self.trainer
        acc = t.accelerator
        world, spg = acc.num_processes, t.args.steps_per_generation
        full = [self._gathered(out) for out in rounds]
        rows = [(r, g * G + i) for r, g in chosen for i in range(G)]
        # a batch every process and micro-batch can split evenly: top up with dropped rows, masked out
        short = -len(rows) % (world * spg)
        filler = [(r, g * G + i) for r, g in dropped for i in range(G)][:short]
        widths = {"prompt": max(f["prompt_ids"].shape[1] for f in full),
                  "completion": max(f["completion_ids"].shape[1] for f in full)}

        def widen(key: str, tensor):
            layout = self._layout(key, tensor)
            if layout == "row" or tensor.shape[1] == widths[layout]:
                return tensor
            pad = tensor.new_full((tensor.shape[0], widths[layout] - tensor.shape[1]), self._fill(key))
            return torch.cat([pad, tensor] if layout == "prompt" else [tensor, pad], dim=1)

        order = rows + filler
        merged = {}
        for key in full[0]:
            parts = [widen(key, f[key]) for f in full]
            merged[key] = torch.stack([parts[r][i] for r, i in order])
        if filler:  # masked rows: no tokens in the loss, no advantage
            merged["completion_mask"][len(rows):] = 0
            merged["advantages"][len(rows):] = 0
        loss_mask = merged["completion_mask"]
        if "tool_mask" in merged:
            loss_mask = loss_mask * merged["tool_mask"]
        share = len(order) // world
        local = slice(acc.process_index * share, (acc.process_index + 1) * share)
        result = self._trim({key: value[local] for key, value in merged.items()})
        result["num_items_in_batch"] = loss_mask.sum()  # over the whole batch, as TRL counts it
        return result

    def _trim(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Drop the padding columns no row of this share needs (prompt: leading, completion: trailing)."""
        used = batch["prompt_mask"].any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        used = batch["completion_mask"].any(dim=0).nonzero()
        last = int(used[-1]) + 1 if len(used) else 1
        out = {}
        for key, value in batch.items():
            layout = self._layout(key, value)
            out[key] = value[:, first:] if layout == "prompt" else value[:, :last] if layout == "completion" else value
        return out

    def _record_reward(self, mixed: list[int], target: int) -> None:
        """Replace the one entry a round TRL logged under ``reward`` and ``rewards/<name>/mean`` by one
        :func:`first_round_reward` a generation (see the module docstring)."""
        metrics = self.trainer._metrics["train"]
        R = len(mixed)
        keys = [k for k in metrics if k == "reward" or (k.startswith("rewards/") and k.endswith("/mean"))]
        for key in keys:
            entries = metrics[key]
            if len(entries) < R:  # not logged once a round (a TRL that logs elsewhere): leave it as logged
                continue
            per_round = entries[-R:]
            metrics[f"dynamic_sampling/all_rounds/{key}"].append(sum(per_round) / R)
            del entries[-R:]
            entries.append(first_round_reward(per_round, mixed, target))

    def _record(self, *, rounds: int, dropped: int, kept: int, prompts: int, tokens: int) -> None:
        metrics = self.trainer._metrics["train"]
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        metrics["dynamic_sampling/groups_dropped"].append(float(dropped))
        metrics["dynamic_sampling/groups_kept"].append(float(kept))
        metrics["dynamic_sampling/prompts"].append(float(prompts))
        metrics["dynamic_sampling/generated_tokens"].append(float(tokens))


def describe(mode: str, max_rounds: int) -> str:
    """One line for the run's log: what the option will do."""
    if mode == "refill":
        return (f"dynamic sampling: refill (groups whose rewards all agree are dropped and replaced from further "
                f"prompts, at most {max_rounds} generation rounds a step)")
    if mode == "drop":
        return "dynamic sampling: drop (groups whose rewards all agree are left out of the loss)"
    return "dynamic sampling: off"



def _pad_id(trainer) -> int:
    tokenizer = getattr(trainer, "_tokenizer", None) or getattr(trainer.processing_class, "tokenizer",
                                                                 trainer.processing_class)
    return tokenizer.pad_token_id
