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
    p.add_argument("--model", required=True,
                   help="Run directory, checkpoint, LoRA adapter, merged model directory, hub id or builtin:tiny.")
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


def run(args: argparse.Namespace) -> int:
    from unsloth_grpo.hardware.backend import BackendError

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
