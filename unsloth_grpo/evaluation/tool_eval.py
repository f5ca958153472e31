"""Evaluation of a tool-using model: accuracy with the tools and without them, and calls per problem.

:func:`run_tool_loop` replays what TRL does during training, one problem at a time: generate a
turn, parse its calls with the tokenizer's response template, run them (through the same
guards as in training), append the results as ``tool`` turns and let the model continue, up to
``max_rounds`` rounds. :func:`evaluate_with_tools` grades the final turn of each transcript
with the task's grader and also runs the plain evaluation (no tools offered), so the report
says what the tools are worth:

``accuracy``                 greedy accuracy with the tools offered
``accuracy_without_tools``   the same problems, no tools in the prompt
``calls_per_problem``        tool calls per transcript
``tool_use_share``           share of problems where the model called a tool
``tool_error_share``         share of calls that failed
``accuracy_when_tool_used``  accuracy on the problems where a tool was called (None if none)

Records hold the rendered transcript (model turn, call, result, next turn) as ``completion``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from unsloth_grpo.tools import transcript as tr


def _call_tool(functions: dict[str, Callable], call: dict) -> str:
    """Run one parsed call; errors come back in the form TRL writes them during training."""
    name = call["name"]
    try:
        if name not in functions:
            raise ValueError(f"Tool {name} not found.")
        arguments = call["arguments"] if isinstance(call["arguments"], dict) else {}
        return str(functions[name](**arguments))
    except Exception as exc:  # noqa: BLE001 - the guards already turned tool failures into ToolError
        return str({"error": str(exc)})


def _parse(tokenizer, ids: list[int], prefix: list[int]) -> dict:
    if getattr(tokenizer, "response_template", None) is not None or \
            getattr(tokenizer, "response_schema", None) is not None:
        from trl.chat_template_utils import parse_response

        return parse_response(tokenizer, ids, prefix=prefix)
    return {"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}


def run_tool_loop(model, tokenizer, prompts: Sequence[list[dict]], *, tools: Sequence[Callable] = (),
                  environment_factory: Callable | None = None, rows: Sequence[dict] | None = None,
                  max_rounds: int = 4, max_new_tokens: int = 256, batch_size: int = 8,
                  temperature: float = 0.0, seed: int = 0) -> list[list[dict]]:
    """One transcript (the messages after the prompt) per prompt; greedy unless ``temperature`` > 0.

    ``tools`` are callables (guarded ones, as :func:`unsloth_grpo.tools.build_tools` makes them);
    with ``environment_factory`` each problem gets a fresh environment, reset with its row.
    """
    import torch

    prompts = [list(p) for p in prompts]
    functions = [{t.__name__: t for t in tools} for _ in prompts]
    if environment_factory is not None:
        from unsloth_grpo.tools import environment_methods

        for i, prompt in enumerate(prompts):
            env = environment_factory()
            observation = env.reset(**(dict(rows[i]) if rows is not None else {}))
            if isinstance(observation, str):
                prompts[i] = prompt[:-1] + [{**prompt[-1], "content": prompt[-1]["content"] + observation}]
            functions[i] = {**functions[i], **environment_methods(env)}
    schemas = [list(f.values()) or None for f in functions]
    transcripts: list[list[dict]] = [[] for _ in prompts]
    pending = list(range(len(prompts)))
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for round_index in range(max_rounds + 1):
        if not pending:
            break
        still = []
        for start in range(0, len(pending), batch_size):
            batch = pending[start:start + batch_size]
            prefixes = [tokenizer.apply_chat_template(prompts[i] + transcripts[i], tools=schemas[i],
                                                      add_generation_prompt=True, tokenize=True, return_dict=False)
                        for i in batch]
            width = max(len(p) for p in prefixes)
            input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prefixes], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes], device=device)
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                     do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
                                     top_p=None, top_k=None, pad_token_id=pad)
            eos = model.generation_config.eos_token_id
            eos = set(eos if isinstance(eos, (list, tuple)) else [eos])
            for row, i in enumerate(batch):
                ids = out[row, width:].tolist()
                cut = next((k + 1 for k, t in enumerate(ids) if t in eos), len(ids))
                message = _parse(tokenizer, ids[:cut], prefixes[row])
                transcripts[i].append(message)
                calls = tr.calls([message])
                if calls and round_index < max_rounds:
                    for call in calls:
                        transcripts[i].append({"role": "tool", "name": call["name"],
                                               "content": _call_tool(functions[i], call)})
                    still.append(i)
        pending = still
    return transcripts


def evaluate_with_tools(model, tokenizer, dataset, *, tools_cfg, is_correct: Callable[[Any, Any], bool] | None = None,
                        lenient_correct: Callable[[Any, Any], bool] | None = None, max_new_tokens: int = 256,
                        batch_size: int = 8, seed: int = 0, limit: int | None = None,
                        **plain_kwargs) -> dict[str, Any]:
    """Accuracy with the configured tools and without them, calls per problem, per-problem transcripts.

    ``lenient_correct`` (the task's lenient reading; None for none) adds ``lenient_accuracy``: with the
    tools, a problem counts when the strict grader or the lenient one says it is right.
    """
    from unsloth_grpo.evaluation.evaluate import evaluate
    from unsloth_grpo.tools import build_tools

    if is_correct is None:  # the library's grader, on the model's last turn
        from unsloth_grpo.answers import is_correct as grade

        def is_correct(completion, gold):
            return grade(tr.final_text(completion), gold)

    n = len(dataset) if limit is None else min(len(dataset), limit)
    rows = [dataset[i] for i in range(n)]
    kwargs = build_tools(tools_cfg)
    t0 = time.perf_counter()
    transcripts = run_tool_loop(model, tokenizer, [r["prompt"] for r in rows], tools=kwargs.get("tools", ()),
                                environment_factory=kwargs.get("environment_factory"), rows=rows,
                                max_rounds=tools_cfg.max_tool_calling_iterations, max_new_tokens=max_new_tokens,
                                batch_size=batch_size, seed=seed)
    seconds = time.perf_counter() - t0
    plain = evaluate(model, tokenizer, dataset, limit=n, is_correct=is_correct, lenient_correct=lenient_correct,
                     max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed, **plain_kwargs)
    records = []
    for i, (row, messages) in enumerate(zip(rows, transcripts)):
        calls = tr.calls(messages)
        correct = bool(is_correct(messages, row["answer"]))
        records.append({"index": i, "prompt": row["prompt"], "gold": row["answer"],
                        "completion": tr.render(messages), "transcript": messages, "correct": correct,
                        "lenient_correct": None if lenient_correct is None
                        else correct or bool(lenient_correct(messages, row["answer"])),
                        "calls": len(calls),
                        "tool_errors": sum(tr.is_error(r) for r in tr.results(messages)),
                        "correct_without_tools": plain["records"][i]["correct"]})
    used = [r for r in records if r["calls"]]
    n_calls = sum(r["calls"] for r in records)
    return {
        "n": n,
        "accuracy": sum(r["correct"] for r in records) / n,
        "lenient_accuracy": None if lenient_correct is None else sum(r["lenient_correct"] for r in records) / n,
        "accuracy_without_tools": plain["accuracy"],
        "format_compliance": plain["format_compliance"],
        "calls_per_problem": n_calls / n,
        "tool_use_share": len(used) / n,
        "tool_error_share": sum(r["tool_errors"] for r in records) / n_calls if n_calls else 0.0,
        "accuracy_when_tool_used": sum(r["correct"] for r in used) / len(used) if used else None,
        "settings": {"max_new_tokens": max_new_tokens, "max_rounds": tools_cfg.max_tool_calling_iterations,
                     "seed": seed, "greedy": True},
        "seconds": seconds + plain["seconds"],
        "records": records,
    }
