"""Training health monitor: watch what TRL logs and say, once and with the fix, when GRPO goes wrong.

GRPO fails quietly. The loss of a run that learns nothing looks much like the loss of one that
works; the signs are in the reward statistics. :class:`HealthChecker` reads the metric dicts TRL
logs (``reward``, ``reward_std``, ``frac_reward_zero_std``, ``rewards/<name>/mean``, ``kl``,
``completions/clipped_ratio``) and returns named warnings:

==================  ============================================================================
``mode_collapse``   reward std had been healthy, then stayed under ``collapse_std``
``no_signal``       most groups have zero reward variance (all-equal rewards give no gradient)
``kl_blowup``       ``kl`` above ``kl_max``
``flat_reward``     no rise in the reward over ``flat_window`` logged steps, nor since the start
``length_clipped``  most completions hit ``max_completion_length``
``format_zero``     a format reward's mean stayed at 0
``no_tool_calls``   tools are offered but no completion called one (``tools/call_frequency`` 0)
``tool_errors``     every tool call failed (``tools/failure_frequency`` 1)
``stale_rollouts``  the completions were not sampled from the weights being trained (TRL's
                    ``sampling/sampling_logp_difference/mean`` stays high, or the direct check
                    of :mod:`unsloth_grpo.training.rollouts` says so)
``wasted_groups``   a sizeable share of groups (not most) keep identical rewards, with dynamic
                    sampling off: recommends ``training.dynamic_sampling`` and its measured effect
``format_without_answers``
                    the format rewards rose and stay high while the task's grading reward stays
                    at 0: the model is paid for the form of an answer, not for answering
==================  ============================================================================

The completions themselves are watched for tricks (``copies_prompt``, ``one_pattern``,
``category_gap``, ``copies_quantity``) by :class:`unsloth_grpo.training.tricks.TrickWatcher`, which hands its warnings
to the same callback.

TRL's ``reward_std`` is the standard deviation over the whole batch; ``frac_reward_zero_std`` is the
share of groups (the ``num_generations`` completions of one prompt) whose rewards were all equal,
which get zero advantage and so no gradient.

Each warning fires at most once per run (``format_zero`` once per format reward). Windows count
*logged* steps, i.e. one entry per ``logging_steps`` training steps.

The checker is pure (metric dicts in, warnings out), so it is tested on recorded metric streams.
:func:`make_health_callback` wraps it in a ``transformers.TrainerCallback`` that prints the warnings
and appends them to ``OUTPUT_DIR/health.jsonl``. Example::

    from unsloth_grpo.training.monitor import HealthThresholds, make_health_callback
    cb = make_health_callback("outputs/run", HealthThresholds(kl_max=0.3, stop_on_collapse=True))
    trainer = GRPOTrainer(..., callbacks=[cb])
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from unsloth_grpo.runs import HEALTH_FILE

#: Reward names treated as format rewards (a key matches when it contains one of them).
DEFAULT_FORMAT_REWARDS = ("strict_format", "soft_format", "xml_count")

#: The rewards whose verdict is a task's answer check (each task's ``grading_rewards``); matched as substrings.
DEFAULT_GRADING_REWARDS = ("correctness", "exact_match", "qa_correctness", "arith_correct", "countdown_equation",
                           "json_extract_values", "tests_passed")

#: The warnings of :mod:`unsloth_grpo.training.tricks`, read from the completions.
TRICK_WARNINGS = ("copies_prompt", "one_pattern", "category_gap", "copies_quantity")

#: Every warning the monitor can raise, in the order it checks them.
WARNING_NAMES = ("mode_collapse", "no_signal", "kl_blowup", "flat_reward", "length_clipped", "format_zero",
                 "no_tool_calls", "tool_errors", "stale_rollouts", "wasted_groups", "format_without_answers",
                 *TRICK_WARNINGS)

#: What training.dynamic_sampling did where it was measured (docs/dynamic-sampling.md); the
#: ``wasted_groups`` warning quotes it.
DYNAMIC_SAMPLING_EFFECT = (
    "on the arith demo (5 seeds, half the groups flat, the same training time as plain GRPO) refill ended "
    "1.8 points higher in held-out accuracy on average (-2.6 to +5.8 by seed) and drop level (-5.6 to +4.4): "
    "within the spread between seeds, so measure it on your run (docs/dynamic-sampling.md)")



def _h(default: Any = dataclasses.MISSING, *, help: str, factory: Any = None):
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class HealthThresholds:
    """Thresholds and windows of the health checks. Windows count logged steps."""

    collapse_std: float = _h(0.1, help="mode_collapse: reward std below this counts as collapsed.")
    collapse_window: int = _h(10, help="mode_collapse: logged steps in a row the reward std must stay low.")
    no_signal_frac: float = _h(
        0.8, help="no_signal: mean share of zero-variance groups (frac_reward_zero_std) at or above this warns."
    )
    no_signal_window: int = _h(10, help="no_signal: logged steps averaged.")
    kl_max: float = _h(0.5, help="kl_blowup: KL above this is too far from the reference model.")
    kl_window: int = _h(2, help="kl_blowup: logged steps in a row KL must stay above kl_max (1 = any spike).")
    flat_window: int = _h(
        50, help="flat_reward: logged steps compared; warns when the mean reward of the window's second half "
        "beats neither its first half nor the run's first flat_window/2 steps by flat_min_delta."
    )
    flat_min_delta: float = _h(
        0.05, help="flat_reward: smallest rise of the mean reward (absolute) that counts as progress."
    )
    clipped_ratio: float = _h(
        0.5, help="length_clipped: share of completions cut at max_completion_length at or above this warns."
    )
    clipped_window: int = _h(5, help="length_clipped: logged steps in a row the share must stay high.")
    format_zero_window: int = _h(
        50, help="format_zero: logged steps in a row a format reward's mean must stay at 0."
    )
    tool_window: int = _h(
        20, help="no_tool_calls / tool_errors: logged steps in a row with no tool call / only failed calls."
    )
    wasted_groups_frac: float = _h(
        0.4, help="wasted_groups: mean share of zero-variance groups at or above this (and below no_signal_frac) "
        "recommends training.dynamic_sampling."
    )
    wasted_groups_window: int = _h(20, help="wasted_groups: logged steps averaged.")
    format_rewards: list[str] = _h(
        help="Names that mark a reward as a format reward (rewards/<name>/mean, matched as substrings).",
        factory=lambda: list(DEFAULT_FORMAT_REWARDS),
    )
    ignore: list[str] = _h(
        help="Warnings not to raise, e.g. ['length_clipped'] for a run whose completions are cut on purpose.",
        factory=list,
    )
    stop_on_collapse: bool = _h(
        False, help="End training cleanly (with a checkpoint) when mode_collapse fires."
    )
    rollout_logp_diff: float = _h(
        0.15, help="stale_rollouts: mean per-token |log-prob| difference between the generator and the trained "
        "model (TRL's sampling/sampling_logp_difference/mean, logged when vLLM generates with importance "
        "sampling correction) above this warns."
    )
    rollout_window: int = _h(5, help="stale_rollouts: logged steps in a row the difference must stay above it.")
    grading_rewards: list[str] = _h(
        help="Names that mark a reward as the task's grading reward (rewards/<name>/mean, matched as substrings); "
        "format_without_answers compares them with the format rewards.",
        factory=lambda: list(DEFAULT_GRADING_REWARDS),
    )
    trick_window: int = _h(
        10, help="format_without_answers: logged steps in a row the format rewards must stay near their best while "
        "the grading reward stays at 0; the completion checks (copies_prompt, one_pattern, category_gap, "
        "copies_quantity) look at the completions of the last trick_window // 2 steps.")
    format_rise: float = _h(
        0.2, help="format_without_answers: how far the format rewards (their means summed) must have risen.")
    category_column: str = _h(
        "category", help="The dataset column that says a problem's kind (one_pattern, category_gap; evaluation "
        "breaks accuracy down by it).")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_window") and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"monitor.{f.name}={value!r}: a window is a count of logged steps, "
                                 "use an integer >= 1")
        for name in ("collapse_std", "kl_max", "flat_min_delta", "rollout_logp_diff", "format_rise"):
            if getattr(self, name) < 0:
                raise ValueError(f"monitor.{name}={getattr(self, name)!r}: use a value >= 0")
        for name in ("no_signal_frac", "clipped_ratio", "wasted_groups_frac"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"monitor.{name}={getattr(self, name)!r}: a share, use a value in (0, 1]")
        if self.flat_window < 2:
            raise ValueError(f"monitor.flat_window={self.flat_window}: compares two halves, use at least 2")
        if isinstance(self.ignore, str):
            raise ValueError(f"monitor.ignore={self.ignore!r}: give a list of warning names, e.g. ['length_clipped']")
        unknown = [n for n in self.ignore if n not in WARNING_NAMES]
        if unknown:
            raise ValueError(f"monitor.ignore: unknown warning(s) {', '.join(unknown)}; "
                             f"valid: {', '.join(WARNING_NAMES)}")
        if self.stop_on_collapse and "mode_collapse" in self.ignore:
            raise ValueError("monitor.stop_on_collapse is on but monitor.ignore lists mode_collapse; "
                             "remove one of the two")
        for name in ("format_rewards", "grading_rewards"):
            if isinstance(getattr(self, name), str):
                raise ValueError(f"monitor.{name}={getattr(self, name)!r}: give a list of names, "
                                 "e.g. ['strict_format']")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "HealthThresholds":
        """Build from a config mapping; unknown keys are an error that lists the valid ones."""
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown monitor setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        return cls(**data)


@dataclass
class HealthWarning:
    """One fired warning: what happened, at which step, how to fix it, and the numbers behind it."""

    step: int
    name: str
    message: str
    fix: str
    values: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _num(logs: Mapping[str, Any], key: str) -> float | None:
    value = logs.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _mean(xs: Iterable[float]) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


class HealthChecker:
    """Consumes one metric dict per logged step and returns the warnings that fire at that step.

    ``update`` ignores dicts without a ``reward`` key (final summaries, evaluation logs), so it can
    be fed everything the trainer logs.
    """

    def __init__(self, thresholds: HealthThresholds | None = None) -> None:
        self.t = thresholds or HealthThresholds()
        t = self.t
        self.fired: list[HealthWarning] = []
        self._fired_keys: set[tuple[str, str]] = set()
        self._std_low_run = 0
        self._had_diversity = False
        self._zero_std = deque(maxlen=t.no_signal_window)
        self._wasted = deque(maxlen=t.wasted_groups_window)
        self._kl_high_run = 0
        self._rewards = deque(maxlen=t.flat_window)
        self._start_rewards: list[float] = []
        self._clipped_run = 0
        self._format_zero_run: dict[str, int] = {}
        self._no_call_run = 0
        self._all_failed_run = 0
        self._stale_run = 0
        self._answers: deque[tuple[float, float]] = deque(maxlen=t.trick_window)
        self._format_first: float | None = None
        self._format_best = 0.0

    # ------------------------------------------------------------------ helpers
    def _fire(self, out: list[HealthWarning], step: int, name: str, message: str, fix: str,
              values: dict[str, Any], subject: str = "") -> None:
        if (name, subject) in self._fired_keys or name in self.t.ignore:
            return
        self._fired_keys.add((name, subject))
        w = HealthWarning(step=step, name=name, message=message, fix=fix, values=values)
        self.fired.append(w)
        out.append(w)

    def add(self, warning: HealthWarning) -> bool:
        """Record a warning found outside the metric stream (the rollout check); False when it is ignored
        or has fired already."""
        if (warning.name, "") in self._fired_keys or warning.name in self.t.ignore:
            return False
        self._fired_keys.add((warning.name, ""))
        self.fired.append(warning)
        return True

    def has_fired(self, name: str) -> bool:
        return any(n == name for n, _ in self._fired_keys)

    def _format_keys(self, logs: Mapping[str, Any]) -> list[tuple[str, str]]:
        found = []
        for key in logs:
            if key.startswith("rewards/") and key.endswith("/mean"):
                reward = key[len("rewards/"):-len("/mean")]
                if any(marker in reward for marker in self.t.format_rewards):
                    found.append((reward, key))
        return found

    # ------------------------------------------------------------------ the checks
    def update(self, step: int, logs: Mapping[str, Any]) -> list[HealthWarning]:
        """Record one logged step; return the warnings that fire now (each fires once per run)."""
        reward = _num(logs, "reward")
        if reward is None:
            return []
        t, out = self.t, []

        std = _num(logs, "reward_std")
        if std is not None:
            if std < t.collapse_std:
                self._std_low_run += 1
            else:
                self._std_low_run = 0
                self._had_diversity = True
            # A std that was never healthy is "no signal" (the reward cannot tell samples apart),
            # not a collapse: collapse means the policy had diversity and lost it.
            if self._had_diversity and self._std_low_run >= t.collapse_window:
                self._fire(
                    out, step, "mode_collapse",
                    f"reward std stayed below {t.collapse_std} for {self._std_low_run} logged steps "
                    f"(now {std:.3g}): the completions of a group have become alike.",
                    "Raise num_generations or the sampling temperature, lower the learning rate, or add "
                    "a reward that separates good from bad samples more finely.",
                    {"reward_std": std, "window": self._std_low_run, "entropy": _num(logs, "entropy")},
                )

        zero = _num(logs, "frac_reward_zero_std")
        if zero is not None:
            self._zero_std.append(zero)
            mean_zero = _mean(self._zero_std)
            # After a collapse its warning already explains the zero-variance groups.
            if (len(self._zero_std) == t.no_signal_window and mean_zero >= t.no_signal_frac
                    and not self.has_fired("mode_collapse")):
                self._fire(
                    out, step, "no_signal",
                    f"on average {mean_zero:.0%} of the groups had identical rewards over the last "
                    f"{t.no_signal_window} logged steps: their advantages are 0, so they teach nothing.",
                    "The reward is too strict (everything scores 0) or too easy (everything scores the max): "
                    "give partial credit, pick problems of fitting difficulty, or raise num_generations. "
                    "Check the reward on real completions with the reward lab.",
                    {"frac_reward_zero_std": zero, "window_mean": mean_zero, "reward": reward},
                )

        if zero is not None:
            self._check_wasted(out, step, logs, zero)

        kl = _num(logs, "kl")
        if kl is not None:
            self._kl_high_run = self._kl_high_run + 1 if kl > t.kl_max else 0
            if self._kl_high_run >= t.kl_window:
                self._fire(
                    out, step, "kl_blowup",
                    f"KL to the reference model is {kl:.3g}, above {t.kl_max} for {self._kl_high_run} logged "
                    "step(s): the policy is drifting fast and may be gaming the reward.",
                    "Lower the learning rate (e.g. halve it), raise beta, or lower max_grad_norm.",
                    {"kl": kl, "window": self._kl_high_run},
                )

        self._rewards.append(reward)
        half = t.flat_window // 2
        if len(self._start_rewards) < half:
            self._start_rewards.append(reward)
        if len(self._rewards) == t.flat_window:
            values = list(self._rewards)
            first, second = _mean(values[:half]), _mean(values[-half:])
            start = _mean(self._start_rewards)
            # A run that rose and then levelled off has converged; only a reward that is no
            # higher than it was at the start of the run, nor than a window ago, is flat.
            if second - first < t.flat_min_delta and second - start < t.flat_min_delta:
                self._fire(
                    out, step, "flat_reward",
                    f"the mean reward did not rise over the last {t.flat_window} logged steps "
                    f"({first:.3g} -> {second:.3g}, needed +{t.flat_min_delta}).",
                    "Check the reward on real completions with the reward lab (does it ever vary?), "
                    "raise the learning rate, or train longer if the run is young.",
                    {"first_half_mean": first, "second_half_mean": second, "window": t.flat_window},
                )

        clipped = _num(logs, "completions/clipped_ratio")
        if clipped is not None:
            self._clipped_run = self._clipped_run + 1 if clipped >= t.clipped_ratio else 0
            if self._clipped_run >= t.clipped_window:
                self._fire(
                    out, step, "length_clipped",
                    f"{clipped:.0%} of the completions were cut at max_completion_length "
                    f"({self._clipped_run} logged steps in a row): truncated answers lose their reward.",
                    "Raise max_completion_length, or penalise length (e.g. a length reward), or ask for "
                    "shorter reasoning in the system prompt.",
                    {"clipped_ratio": clipped, "mean_length": _num(logs, "completions/mean_length"),
                     "window": self._clipped_run},
                )

        for reward_name, key in self._format_keys(logs):
            value = _num(logs, key)
            if value is None:
                continue
            run = self._format_zero_run.get(reward_name, 0)
            run = run + 1 if value == 0.0 else 0
            self._format_zero_run[reward_name] = run
            if run >= t.format_zero_window:
                self._fire(
                    out, step, "format_zero",
                    f"format reward '{reward_name}' stayed at 0 for {run} logged steps: the model never "
                    "produces the format, so this reward gives no gradient.",
                    f"Raise the weight of '{reward_name}', add a reward with incremental credit (xml_count, "
                    "soft_format), or teach the format first with a short SFT stage.",
                    {key: value, "window": run},
                    subject=reward_name,
                )
        self._check_tools(out, step, logs)
        self._check_rollouts(out, step, logs)
        self._check_answers(out, step, logs)
        return out

    def _check_answers(self, out: list[HealthWarning], step: int, logs: Mapping[str, Any]) -> None:
        """The format rewards rose and stay near their best, and the grading reward stays at 0: what a
        model that copies the prompt's template, or writes well-formed wrong answers, looks like."""
        t = self.t
        fmt = [v for _, key in self._format_keys(logs) if (v := _num(logs, key)) is not None]
        grading = [v for key in logs if key.startswith("rewards/") and key.endswith("/mean")
                   and any(g in key[len("rewards/"):-len("/mean")] for g in t.grading_rewards)
                   and not any(f in key for f in t.format_rewards) and (v := _num(logs, key)) is not None]
        if not fmt or not grading:
            return
        f, g = sum(fmt), max(grading)
        if self._format_first is None:
            self._format_first = f
        self._format_best = max(self._format_best, f)
        self._answers.append((f, g))
        if len(self._answers) < t.trick_window:
            return
        near_best = all(x >= 0.8 * self._format_best for x, _ in self._answers)
        if near_best and self._format_best - self._format_first >= t.format_rise and all(y <= 0 for _, y in self._answers):
            self._fire(
                out, step, "format_without_answers",
                f"the format rewards rose from {self._format_first:.3g} to {f:.3g} and stayed there for "
                f"{t.trick_window} logged steps while the grading reward stayed at 0: the model is paid for the "
                "form of an answer and never for a right one (a copied template, or one fixed wrong answer).",
                "Read the completions (samples.jsonl). Make the format pay only with an answer inside "
                "(require_answer), weigh correctness above format, show worked examples rather than a template, "
                "or start from a short SFT stage on worked answers so that some completions are right.",
                {"format_rewards": f, "grading_reward": g, "window": t.trick_window},
            )

    def _check_wasted(self, out: list[HealthWarning], step: int, logs: Mapping[str, Any], zero: float) -> None:
        """A share of every step's groups teaches nothing, though the reward does vary elsewhere:
        dynamic sampling would spend those steps on groups that do. Not when it is already on
        (its metrics are logged), nor where no_signal or mode_collapse explain the flat groups."""
        t = self.t
        if "dynamic_sampling/rounds" in logs:
            self._wasted.clear()
            return
        self._wasted.append(zero)
        if len(self._wasted) < t.wasted_groups_window or self.has_fired("no_signal") or self.has_fired("mode_collapse"):
            return
        mean_zero = _mean(self._wasted)
        if t.wasted_groups_frac <= mean_zero < t.no_signal_frac:
            self._fire(
                out, step, "wasted_groups",
                f"on average {mean_zero:.0%} of the groups had identical rewards over the last "
                f"{t.wasted_groups_window} logged steps: each step pays to generate and train on them and learns "
                "nothing from them (under the dapo loss they also dilute the step).",
                "Set training.dynamic_sampling: refill (groups that agree are replaced by fresh prompts' groups, "
                "at most training.max_sampling_rounds generations a step) or drop (they are only left out). "
                f"Measured: {DYNAMIC_SAMPLING_EFFECT}.",
                {"frac_reward_zero_std": zero, "window_mean": mean_zero},
            )

    def _check_rollouts(self, out: list[HealthWarning], step: int, logs: Mapping[str, Any]) -> None:
        """TRL 1.14 (and Unsloth's trainer, when importance sampling correction is on) logs how far the
        generator's log-probabilities are from the trained model's on the same tokens."""
        t = self.t
        diff = _num(logs, "sampling/sampling_logp_difference/mean")
        if diff is None:
            return
        self._stale_run = self._stale_run + 1 if diff > t.rollout_logp_diff else 0
        if self._stale_run >= t.rollout_window:
            self._fire(
                out, step, "stale_rollouts",
                f"the generator's log-probabilities differ from the trained model's by {diff:.3g} per token on "
                f"average ({self._stale_run} logged steps in a row above {t.rollout_logp_diff}): the rollouts "
                "are not coming from the weights being trained (an adapter the generator ignores, or weights "
                "it did not receive after a sleep).",
                "Update unsloth and unsloth_zoo (a bug with TRL >= 1.10 generated Unsloth's vLLM rollouts from "
                "the base model), or set model.fast_inference=off to generate with the trained model itself.",
                {"sampling_logp_difference_mean": diff,
                 "sampling_logp_difference_max": _num(logs, "sampling/sampling_logp_difference/max"),
                 "importance_sampling_ratio_min": _num(logs, "sampling/importance_sampling_ratio/min"),
                 "importance_sampling_ratio_mean": _num(logs, "sampling/importance_sampling_ratio/mean"),
                 "importance_sampling_ratio_max": _num(logs, "sampling/importance_sampling_ratio/max"),
                 "window": self._stale_run},
            )

    def _check_tools(self, out: list[HealthWarning], step: int, logs: Mapping[str, Any]) -> None:
        """TRL logs ``tools/call_frequency`` (calls per completion) and ``tools/failure_frequency``
        (share of calls that failed) only when the run offers tools."""
        t = self.t
        calls = _num(logs, "tools/call_frequency")
        if calls is None:
            return
        self._no_call_run = self._no_call_run + 1 if calls == 0 else 0
        if self._no_call_run >= t.tool_window:
            self._fire(
                out, step, "no_tool_calls",
                f"no completion called a tool for {self._no_call_run} logged steps: the tools teach nothing "
                "and their rewards give no gradient.",
                "Check that the model's chat template renders the tools and that TRL parses its calls "
                "(unsloth-grpo rewards check shows the transcripts); give credit for a well-formed call "
                "(tool_call_format), or use a model trained for tool calling.",
                {"tools/call_frequency": calls, "window": self._no_call_run},
            )
        failed = _num(logs, "tools/failure_frequency")
        self._all_failed_run = self._all_failed_run + 1 if calls > 0 and failed == 1.0 else 0
        if self._all_failed_run >= t.tool_window:
            self._fire(
                out, step, "tool_errors",
                f"every tool call failed for {self._all_failed_run} logged steps: the model calls tools, "
                "but wrongly (unknown name, wrong arguments, a tool that raises or times out).",
                "Read the tool turns in samples.jsonl: they hold the error each call got. Fix the tool "
                "(or raise tools.timeout), or reward calls that run (tool_call_format's last quarter).",
                {"tools/failure_frequency": failed, "tools/call_frequency": calls, "window": self._all_failed_run},
            )

    def feed(self, stream: Iterable[Mapping[str, Any]]) -> list[HealthWarning]:
        """Run the checks over a recorded stream of dicts with a ``step`` key (e.g. metrics.jsonl)."""
        out = []
        for i, logs in enumerate(stream):
            out.extend(self.update(int(logs.get("step", i + 1)), logs))
        return out


def _print_warning(console, w: HealthWarning) -> None:
    from rich.markup import escape

    console.print(f"[bold yellow]health warning[/] [bold]{w.name}[/] at step {w.step}: {escape(w.message)}")
    console.print(f"  [green]fix:[/] {escape(w.fix)}")


def make_health_callback(output_dir: str | Path | None, thresholds: HealthThresholds | None = None, *,
                         console=None):
    """A ``transformers.TrainerCallback`` that runs :class:`HealthChecker` on every log.

    Warnings are printed (rich) and appended to ``output_dir/health.jsonl`` (skipped when
    ``output_dir`` is None; a run starting at step 0 replaces an old file, a resumed run
    appends). With ``thresholds.stop_on_collapse`` a ``mode_collapse`` warning sets
    ``should_training_stop`` and ``should_save``, so the trainer saves a checkpoint and ends.
    Only the main process prints and writes; every process stops.
    """
    from transformers import TrainerCallback

    class HealthMonitor(TrainerCallback):
        def __init__(self) -> None:
            self.checker = HealthChecker(thresholds)
            self.pending: list[HealthWarning] = []
            self.path = None if output_dir is None else Path(output_dir) / HEALTH_FILE
            if console is None:
                from rich.console import Console

                self.console = Console(highlight=False)
            else:
                self.console = console

        @property
        def warnings(self) -> list[HealthWarning]:
            return self.checker.fired

        def report(self, warning: HealthWarning) -> None:
            """A warning found outside the logged metrics (the rollout check): said at the next log."""
            if self.checker.add(warning):
                self.pending.append(warning)

        def on_train_begin(self, args, state, control, **kwargs):
            # a fresh run starts a fresh file; a resumed one (global_step > 0) appends
            if state.global_step == 0 and state.is_world_process_zero and self.path is not None \
                    and self.path.exists():
                self.path.unlink()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs:
                return control
            fired, self.pending = self.pending + self.checker.update(state.global_step, logs), []
            if fired and state.is_world_process_zero:
                if self.path is not None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    with self.path.open("a") as fh:
                        for w in fired:
                            fh.write(json.dumps(w.to_dict()) + "\n")
                for w in fired:
                    _print_warning(self.console, w)
            if self.checker.t.stop_on_collapse and any(w.name == "mode_collapse" for w in fired):
                if state.is_world_process_zero:
                    self.console.print("[bold red]stopping:[/] mode collapse (monitor.stop_on_collapse is on); "
                                       "saving a checkpoint first.")
                control.should_training_stop = True
                control.should_save = True
            return control

    return HealthMonitor()
