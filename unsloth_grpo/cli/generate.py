"""``unsloth-grpo generate``: answer questions with a model, run, checkpoint, adapter or merged export.

    unsloth-grpo generate --model outputs/smoke "What is 15 + 27?"

The work is :func:`unsloth_grpo.evaluation.inference.answer_questions`.
"""

from __future__ import annotations

import argparse
import json
import sys

from unsloth_grpo.evaluation.inference import answer_questions
from unsloth_grpo.tasks import available_tasks


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="Answer questions with a model, run, checkpoint, adapter or merged export.",
        description="Answer questions with the run's system prompt and chat template; prints each "
                    "completion and the answer extracted from it.")
    from unsloth_grpo.models.ref import BUILTIN_MODELS

    p.add_argument("--model", required=True,
                   help="Run directory, checkpoint, LoRA adapter, merged model directory, hub id, or a built-in "
                        f"model: {', '.join(BUILTIN_MODELS)}.")
    p.add_argument("questions", nargs="+", metavar="QUESTION", help="One or more questions.")
    p.add_argument("--system-prompt", default=None,
                   help="System prompt to use instead of the run's ('' for none).")
    p.add_argument("--task", default=None, choices=available_tasks(),
                   help="Task whose system prompt to use when the model carries no run config (default gsm8k).")
    p.add_argument("--max-new-tokens", type=int, default=256, help="Longest completion, in tokens.")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default).")
    p.add_argument("--top-p", type=float, default=1.0, help="Nucleus sampling when temperature > 0.")
    p.add_argument("--seed", type=int, default=0, help="Seed for sampling.")
    p.add_argument("--json", action="store_true", help="Print one JSON object per question instead of text.")
    p.set_defaults(func=run)


def input_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the command's input, found before any model loads (one line each)."""
    from unsloth_grpo.models.ref import model_ref

    out = [f"question {i} is empty; ask something, e.g. \"What is 15 + 27?\""
           for i, q in enumerate(args.questions, 1) if not q.strip()]
    if args.max_new_tokens < 1:
        out.append(f"--max-new-tokens {args.max_new_tokens}: a completion needs at least 1 token (default 256)")
    if args.temperature < 0:
        out.append(f"--temperature {args.temperature}: use 0 (greedy, the default) or a positive value")
    if not 0 < args.top_p <= 1:
        out.append(f"--top-p {args.top_p}: use a value in (0, 1]")
    problem = model_ref(args.model).local_problem()
    if problem is not None:
        out.append(problem)
    return out


def run(args: argparse.Namespace) -> int:
    from unsloth_grpo.hardware.backend import BackendError

    wrong = input_problems(args)
    if wrong:
        print("error: " + "; ".join(wrong), file=sys.stderr)
        return 2
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    try:
        answers = answer_questions(args.model, list(args.questions), system_prompt=args.system_prompt,
                                   task=args.task, max_new_tokens=args.max_new_tokens,
                                   temperature=args.temperature, top_p=args.top_p, seed=args.seed, log=log)
    except (BackendError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for a in answers:
        if args.json:
            print(json.dumps({"question": a.question, "completion": a.completion, "answer": a.answer,
                              "num_tokens": a.num_tokens, "finished": a.finished}))
            continue
        print(f"Q: {a.question}")
        print(a.completion if a.completion else "(empty completion)")
        cut = "" if a.finished else f" (cut at {a.num_tokens} tokens; raise --max-new-tokens)"
        print(f"answer: {a.answer if a.answer is not None else 'none (no <answer>...</answer> in the completion)'}{cut}")
        print()
    return 0
