"""Ask a trained model a question: :func:`answer_questions` (the ``unsloth-grpo generate`` command).

The model may be a run directory, a checkpoint, a LoRA adapter, a merged export, a hub/base
model or ``builtin:tiny``. The prompt is built the way training built it: the system prompt of
the run's recipe (read from the run's ``config.yaml`` or ``reproducibility.json``; the task's
default for a model without one) plus the question, through the tokenizer's chat template.
The answer is extracted with :func:`unsloth_grpo.grading.extract_answer`, the function the
correctness reward and evaluation use.

    unsloth-grpo generate --model outputs/smoke "What is 15 + 27?"

Example::

    from unsloth_grpo.evaluation.inference import answer_questions
    [a] = answer_questions("outputs/smoke", ["What is 15 + 27?"])
    a.completion, a.answer     # ('<reasoning>...</reasoning><answer>42</answer>', '42')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_TASK = "gsm8k"


@dataclass
class Answer:
    question: str
    completion: str
    answer: str | None
    num_tokens: int
    finished: bool  # False: cut at max_new_tokens


def _run_config(model: str) -> dict | None:
    """The resolved config dict saved with a run, checkpoint or export, when there is one."""
    p = Path(model)
    if not p.exists():
        return None
    import yaml

    from unsloth_grpo.runs import CHECKPOINTS_DIR, read_bundle, run_dir_of

    candidates = [p]
    if p.parent.name == CHECKPOINTS_DIR:
        candidates += [p.parent.parent, run_dir_of(p)]
    for d in candidates:
        if (d / "config.yaml").is_file():
            try:
                loaded = yaml.safe_load((d / "config.yaml").read_text())
            except yaml.YAMLError:
                continue
            if isinstance(loaded, dict):
                return loaded
    bundle = read_bundle(p)
    return bundle.get("config") if bundle else None


def task_system_prompt(task: str) -> str | None:
    from unsloth_grpo.tasks import get_task

    return get_task(task).system_prompt


def resolve_system_prompt(model: str, *, system_prompt: str | None = None, task: str | None = None) -> str | None:
    """An explicit prompt wins; then the run's recipe (data.system_prompt, else its task's default);
    then ``task``'s default (gsm8k when not given)."""
    if system_prompt is not None:
        return system_prompt or None  # "" means: no system message
    cfg = _run_config(model)
    if cfg:
        data = cfg.get("data") or {}
        if data.get("system_prompt"):
            return data["system_prompt"]
        return task_system_prompt(task or cfg.get("task") or DEFAULT_TASK)
    return task_system_prompt(task or DEFAULT_TASK)


def build_prompt(question: str, system_prompt: str | None) -> list[dict[str, str]]:
    from unsloth_grpo.data import chat_prompt

    return chat_prompt(question, system_prompt)


def _plain_text(messages: list[dict[str, str]]) -> str:
    """A prompt for a tokenizer without a chat template (a base model): the turns as plain text."""
    return "\n\n".join(m["content"] for m in messages) + "\n"


def answer_questions(model: Any, questions: list[str] | str, *, system_prompt: str | None = None,
                     task: str | None = None, max_new_tokens: int = 256, temperature: float = 0.0,
                     top_p: float = 1.0, seed: int | None = 0, loaded: Any = None, log=print) -> list[Answer]:
    """Generate one completion per question and extract its answer.

    ``model`` is a path or name for :func:`unsloth_grpo.hardware.backend.load_for_inference`; pass an
    already loaded ``LoadedModel`` as ``loaded`` to skip loading (the path then only serves to
    find the run's system prompt). ``questions`` is a list of strings, or one string (one question).
    A model name that cannot load (a folder that does not exist, a hub id out of reach) is refused at
    once, before anything loads.
    """
    from unsloth_grpo.grading import extract_answer
    from unsloth_grpo.evaluation.generation import generate_detailed

    if isinstance(questions, str):  # one question, not its characters
        questions = [questions]
    if not isinstance(questions, (list, tuple)) or not all(isinstance(q, str) for q in questions):
        raise TypeError(f"questions: expected a list of strings (or one string), got {_type_of(questions)}")
    if not questions:
        raise ValueError("no question given: pass at least one, e.g. \"What is 15 + 27?\"")
    if any(not str(q).strip() for q in questions):  # said before the model loads, not after
        raise ValueError("an empty question: ask something, e.g. \"What is 15 + 27?\"")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens}: a completion needs at least 1 token")
    if loaded is None:
        from unsloth_grpo.hardware.backend import load_for_inference

        loaded = load_for_inference(str(model), log=log)
    prompt_text = resolve_system_prompt(str(model), system_prompt=system_prompt, task=task)
    tok = loaded.tokenizer
    messages = [build_prompt(q, prompt_text) for q in questions]
    if getattr(tok, "chat_template", None):
        prompts: list = messages
    else:
        log("note: the tokenizer has no chat template (a base model?); the prompt is plain text")
        prompts = [_plain_text(m) for m in messages]
    outs = generate_detailed(loaded.model, tok, prompts, max_new_tokens=max_new_tokens,
                             temperature=temperature, top_p=top_p, seed=seed)
    return [Answer(q, g[0].text, extract_answer(g[0].text), g[0].num_tokens, g[0].finished)
            for q, g in zip(questions, outs)]


def _type_of(value: Any) -> str:
    """``value``'s type in words, with the first item's for a list (``a list holding int``)."""
    if isinstance(value, (list, tuple)):
        odd = next((v for v in value if not isinstance(v, str)), None)
        return f"a {type(value).__name__} holding {type(odd).__name__} ({odd!r})"
    return f"{type(value).__name__} ({value!r})"[:120]


__all__ = ["Answer", "answer_questions", "resolve_system_prompt"]
