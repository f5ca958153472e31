"""A tiny language model and tokenizer built locally, for the smoke preset and the tests.

No model hub is needed: a byte-level BPE tokenizer is trained on a few thousand synthetic
lines, the answer-format tags are added as whole tokens (a random model never spells
``<answer>`` out of sub-word pieces, so a format reward would stay at zero), and a
two-layer Qwen2 with ~100k parameters is initialised with large weights so that LoRA can
move its logits (with the usual ``initializer_range=0.02`` the output distribution is
nearly uniform and a low-rank update cannot shape it).

Example::

    from unsloth_grpo.models.builtin import build_tiny_model
    path = build_tiny_model("/tmp/tiny")          # ~1 s, idempotent
    # then load it like any local checkpoint:
    # AutoModelForCausalLM.from_pretrained(path)
    path = build_tiny_model("/tmp/digits", variant="digits")   # the arithmetic model (~0.5M parameters)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from pathlib import Path
from typing import Iterator

#: Tags the tiny tokenizer keeps whole. They are the GSM8K recipe's answer format.
FORMAT_TOKENS = ["<reasoning>", "</reasoning>", "<answer>", "</answer>"]

#: The code task's fences, kept whole by ``builtin:tiny-code`` (the same model otherwise).
CODE_TOKENS = ["```python\n", "```"]

#: The chat template: ChatML, which Qwen models use. ``add_generation_prompt`` opens the
#: assistant turn so the completion starts right after it.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

#: Tool-call markers the tool-capable tiny tokenizer keeps whole (``build_tiny_model(tool_calling=True)``).
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]

#: ChatML with tool calls, compact enough for a tiny model. The tools are listed in the system
#: turn as ``name(param, ...)``; an assistant call reads ``<tool_call>name`` then one
#: ``key=value`` line per argument, then ``</tool_call>``; a tool result is a ``tool`` turn.
#: Every message renders on its own, so earlier turns never change when later ones are added
#: (TRL's multi-turn loop needs that prefix property).
CHATML_TOOLS_TEMPLATE = (
    "{%- macro tool_list() -%}"
    "Tools:{% for t in tools %} {{ (t.function or t).name }}"
    "({{ ((t.function or t).parameters.properties or {}) | join(', ') }}){% endfor %}"
    "{%- endmacro -%}"
    "{%- if tools and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\n' + tool_list() + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{%- if message['content'] is string %}{{ message['content'] }}{% endif -%}"
    "{%- if message['role'] == 'system' and tools %}{{ '\n' + tool_list() }}{% endif -%}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set fn = call.function or call -%}"
    "{{ '<tool_call>' + fn.name + '\n' }}"
    "{%- if fn.arguments is string %}{{ fn.arguments + '\n' }}{% else -%}"
    "{%- for key, value in fn.arguments.items() -%}"
    "{{ key + '=' + (value if value is string else value | tojson) + '\n' }}"
    "{%- endfor %}{% endif -%}"
    "{{ '</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif -%}"
)

#: How transformers' ``parse_response`` reads a generated turn back into a message with
#: ``tool_calls`` (the inverse of the template above). Saved in the tokenizer config, so TRL
#: finds it on the tokenizer and does not need to recognise the template.
TOOLS_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*(?P<name>[^\s<]+)",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "kv-lines",
            "content_args": {"kv_sep": "=", "value_parser": {"name": "json", "args": {"allow_non_json": True}}},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}

#: Settings of the tiny model (~100k parameters). ``initializer_range=0.3`` gives peaked
#: logits that a LoRA update can reshape; with 0.02 the reward stays flat.
TINY_MODEL_KWARGS = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    initializer_range=0.3,
)

#: The ``digits`` variant, for the arithmetic task (``builtin:tiny-digits``): every digit is its own
#: token (a BPE that merges "38" into one token hides the digit structure that addition needs),
#: and the model is wider and deeper so that it can learn to add at all. Measured on 2 CPU cores:
#: the arith recipe's SFT + GRPO on it takes a few minutes.
#: Its weights start at ``initializer_range=0.1``: at 0.3 the attention logits of a 128-wide model
#: are so large that every head is saturated on a random position and addition is never learned;
#: at 0.02 the output logits are too flat for LoRA to shape.
DIGITS_MODEL_KWARGS = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    initializer_range=0.1,
)

#: Built-in variants: architecture and whether the tokenizer splits digits.
VARIANTS = {
    "tiny": (TINY_MODEL_KWARGS, False),
    "digits": (DIGITS_MODEL_KWARGS, True),
}

_MARKER = "tiny_model.json"


def _corpus(n_lines: int, seed: int, *, tool_calling: bool = False) -> list[str]:
    """Synthetic text close to what the smoke task shows: numbers, words, the tags.

    With ``tool_calling`` it also shows calls of the example tools, so that their names and
    parameter names become single tokens a tiny model can learn to emit.
    """
    rng = random.Random(seed)
    names = ["Ann", "Bob", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana"]
    things = ["apples", "books", "coins", "eggs", "pens", "stamps", "cards", "shells"]
    verbs = ["buys", "finds", "gives away", "sells", "loses", "gets"]
    lines = []
    for _ in range(n_lines):
        a, b = rng.randint(1, 999), rng.randint(1, 99)
        name, thing, verb = rng.choice(names), rng.choice(things), rng.choice(verbs)
        lines.append(f"{name} has {a} {thing} and {verb} {b} more. How many {thing} now?")
        lines.append(f"{a} + {b} = {a + b}. {a} - {b} = {a - b}. {a} * {b} = {a * b}.")
        lines.append("Respond in the format: reasoning, then the answer as a number.")
        if tool_calling:
            lines.append(f"Tools: calculate(expression) guess(number)\ncalculate\nexpression={a}+{b}\n"
                         f"guess\nnumber={b}\nhigher lower correct")
    return lines


def build_tokenizer(path: str | os.PathLike, *, vocab_size: int = 512, seed: int = 0,
                    extra_tokens: list[str] | tuple[str, ...] = (), tool_calling: bool = False,
                    split_digits: bool = False):
    """Train and save a byte-level BPE tokenizer with a ChatML chat template (and ``extra_tokens`` kept whole).

    ``tool_calling`` adds the tool-call markers as whole tokens, the tool-capable template
    (:data:`CHATML_TOOLS_TEMPLATE`) and the response template TRL parses calls with.
    ``split_digits`` cuts every digit into its own token before BPE runs, so no merge ever
    joins two digits.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = _corpus(2000, seed, tool_calling=tool_calling)
    if split_digits:  # the chat roles as whole tokens keep the arithmetic prompts short
        lines += ["system user assistant"] * 200
    tok.train_from_iterator(lines, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.add_tokens(FORMAT_TOKENS + list(extra_tokens) + (TOOL_TOKENS if tool_calling else []))
    fast.chat_template = CHATML_TOOLS_TEMPLATE if tool_calling else CHATML_TEMPLATE
    if tool_calling:
        fast.response_template = TOOLS_RESPONSE_TEMPLATE
    fast.padding_side = "left"
    fast.save_pretrained(str(path))
    return fast


def build_tiny_model(path: str | os.PathLike, *, seed: int = 0, overwrite: bool = False,
                     extra_tokens: list[str] | tuple[str, ...] = (), tool_calling: bool = False,
                     variant: str = "tiny") -> str:
    """Build (or reuse) the tiny Qwen2 model and tokenizer in ``path``; return the path.

    ``variant`` is a key of :data:`VARIANTS`: ``tiny`` (the smoke model) or ``digits`` (the
    arithmetic model). The result is deterministic for a given ``seed``. An existing build is
    reused unless ``overwrite`` is set, so calling this at the start of every smoke run costs nothing.
    ``extra_tokens`` are added as whole tokens after the format tags (``CODE_TOKENS`` for
    ``builtin:tiny-code``); ``tool_calling`` builds the tool-capable tokenizer (``builtin:tiny-tools``).
    Without any of them the model is exactly ``builtin:tiny``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if variant not in VARIANTS:
        raise ValueError(f"variant '{variant}' is unknown; choose one of: {', '.join(VARIANTS)}")
    model_kwargs, split_digits = VARIANTS[variant]
    path = Path(path)
    marker = path / _MARKER
    wanted = {"seed": seed, **model_kwargs, **({"split_digits": True} if split_digits else {}),
              **({"extra_tokens": list(extra_tokens)} if extra_tokens else {}),
              **({"tool_calling": True} if tool_calling else {})}
    if not overwrite and marker.exists():
        try:
            if json.loads(marker.read_text()) == wanted:
                return str(path)
        except json.JSONDecodeError:
            pass
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(path, seed=seed, extra_tokens=extra_tokens, tool_calling=tool_calling,
                                split_digits=split_digits)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **model_kwargs,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    if tool_calling:  # a call ends the turn, so its result comes back before the model goes on
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("</tool_call>")]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(str(path))
    marker.write_text(json.dumps(wanted))
    return str(path)


@contextlib.contextmanager
def node_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (a file) so processes on one machine take turns.

    Used around building ``builtin:tiny``: under torchrun every rank would otherwise write the
    same files at once and one could read a half-written model.
    """
    import fcntl

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
