"""The tokenizer part of a GGUF file: what llama.cpp needs to cut text and end a turn as transformers does.

    from unsloth_grpo.export.gguf_vocab import prepared_tokenizer, tokenizer_fields
    fields = tokenizer_fields(prepared_tokenizer(Path("exports/smoke")), vocab_size=516, config={})
    fields["pre"], fields["eos"]          # ('qwen2', 2)

Byte-level BPE tokenizers (GPT-2 style: SmolLM2, Qwen2/2.5/3, Llama 3) are written as llama.cpp's ``gpt2``
model: every vocabulary row's text and type (normal, control, user-defined, unused), the merges, the
pre-tokenizer's name, bos/eos/pad/unk, whether bos/eos are added, and the chat template. A SentencePiece
tokenizer (Gemma 3) is written as llama.cpp's ``llama`` model, its pieces, scores and types those of
the GGUF file the model was converted from (:mod:`unsloth_grpo.export.gguf_spm`); one without that
file's vocabulary is refused. The
tokenizer is the one the model's folder loads as (transformers may rebuild it for the folder's
``model_type``: the tiny built-in models load as Qwen2's tokenizer), with eos and pad as
:func:`unsloth_grpo.models.tokenizer.prepare_tokenizer` settles them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unsloth_grpo.export.gguf_errors import GGUFError  # noqa: F401 - raised here, and imported from here by callers



def _tokenizer_json(tokenizer) -> dict:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise GGUFError("the tokenizer is not a fast (tokenizers) tokenizer; the GGUF writer reads its "
                        "tokenizer.json. Save the tokenizer with a tokenizer.json and export again")
    return json.loads(backend.to_str())


#: The split expressions of the byte-level BPE tokenizers written here, as tokenizer.json spells them.
#: The first group is Qwen2's (every digit alone), the second Llama 3's (digits in runs of up to 3).
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")

#: llama.cpp's pre-tokenizer names (``tokenizer.ggml.pre``) this writer recognises, with what each does.
PRE_TOKENIZERS = {
    "gpt-2": "GPT-2's byte-level split",
    "smollm": "every digit alone, then GPT-2's split (SmolLM, SmolLM2)",
    "qwen2": "Qwen2's split",
    "llama-bpe": "Llama 3's split",
}


def pre_tokenizer_name(tok_json: dict) -> str:
    """llama.cpp's name for the tokenizer's pre-tokenizer, read from its structure, or GGUFError.

    llama.cpp reimplements each pre-tokenizer it supports and picks one by this name; a name that
    does not match what the tokenizer does makes llama.cpp cut text differently from transformers,
    so an unknown one is refused rather than guessed."""
    pre = tok_json.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps]

    def byte_level(step, regex: bool) -> bool:
        return step.get("type") == "ByteLevel" and bool(step.get("use_regex", True)) == regex \
            and not step.get("add_prefix_space", False)

    if kinds == ["ByteLevel"] and byte_level(steps[0], True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and byte_level(steps[1], True):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and byte_level(steps[1], False):
        pattern = (steps[0].get("pattern") or {}).get("Regex")
        if pattern == _QWEN2_SPLIT:
            return "qwen2"
        if pattern == _LLAMA3_SPLIT:
            return "llama-bpe"
    shape = json.dumps(pre)[:300]
    raise GGUFError(f"the tokenizer's pre-tokenizer is not one the GGUF writer knows ({shape}); it writes byte-level "
                    f"BPE tokenizers that split text as one of: {', '.join(f'{k} ({v})' for k, v in PRE_TOKENIZERS.items())}. "
                    "Convert the merged folder with llama.cpp's convert_hf_to_gguf.py instead")


def is_sentencepiece(tj: dict) -> bool:
    """Whether a tokenizer.json is a SentencePiece model converted (a BPE or Unigram that marks spaces with "▁")."""
    return "\u2581" in json.dumps([tj.get("pre_tokenizer"), tj.get("normalizer")], ensure_ascii=False)


def check_tokenizer(tokenizer, folders=()) -> str:
    """The pre-tokenizer name when the tokenizer can be written; GGUFError otherwise.

    Written: byte-level BPE with merges, and a SentencePiece tokenizer whose source GGUF vocabulary is
    kept beside the model (:func:`unsloth_grpo.export.gguf_spm.find_kept_vocab`, looked for in ``folders``
    and the built-in models' checkpoints)."""
    tj = _tokenizer_json(tokenizer)
    model = tj.get("model") or {}
    if is_sentencepiece(tj):
        from unsloth_grpo.export.gguf_spm import find_kept_vocab, missing_vocab_message

        kept = find_kept_vocab(tokenizer, folders)
        if kept is None:
            raise GGUFError(missing_vocab_message(folders))
        return kept.pre
    if model.get("type") != "BPE" or not model.get("merges"):
        raise GGUFError(f"the tokenizer is a {model.get('type')} model; the GGUF writer writes byte-level BPE "
                        "tokenizers (GPT-2 style: SmolLM2, Qwen2/2.5/3, Llama 3) and Gemma 3's SentencePiece one. "
                        "Convert the merged folder with llama.cpp's convert_hf_to_gguf.py")
    return pre_tokenizer_name(tj)


def prepared_tokenizer(model_dir: Path):
    """The folder's tokenizer with eos and pad as training and evaluation use them."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer, GenerationConfig

    from unsloth_grpo.models.tokenizer import prepare_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    try:
        gen = GenerationConfig.from_pretrained(str(model_dir))
    except (OSError, ValueError):
        gen = None
    return prepare_tokenizer(tokenizer, SimpleNamespace(generation_config=gen))


def _looks_like_control(text: str) -> bool:
    """Added tokens llama.cpp treats as control tokens though a tokenizer may not flag them special."""
    return text.startswith("<|") and text.endswith("|>")


def special_fields(tokenizer, config: dict) -> dict[str, Any]:
    """bos/eos/pad/unk, whether bos and eos are added (read off the tokenizer's own output), the chat template."""
    probe = "a"  # what the tokenizer adds around plain text, read off its own output
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    framed = tokenizer(probe)["input_ids"]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else config.get("bos_token_id")
    fields = {
        "bos": bos if isinstance(bos, int) else None,
        "eos": tokenizer.eos_token_id, "pad": tokenizer.pad_token_id, "unk": tokenizer.unk_token_id,
        "add_bos": bool(framed[:1] != plain[:1] and bos is not None and framed[:1] == [bos]),
        "add_eos": bool(framed[-1:] != plain[-1:] and framed[-1:] == [tokenizer.eos_token_id]),
        "chat_template": tokenizer.chat_template,
    }
    if fields["eos"] is None:
        raise GGUFError("the tokenizer names no end-of-sequence token and the model's generation config none either; "
                        "llama.cpp would not know where an answer ends")
    return fields


def tokenizer_fields(tokenizer, vocab_size: int, config: dict, folders=()) -> dict[str, Any]:
    """What the GGUF file says about the tokenizer, as plain values (written by :func:`add_tokenizer`)."""
    from gguf import TokenType

    tj = _tokenizer_json(tokenizer)
    pre = check_tokenizer(tokenizer, folders)
    if is_sentencepiece(tj):
        from unsloth_grpo.export.gguf_spm import find_kept_vocab, spm_fields

        return {**spm_fields(find_kept_vocab(tokenizer, folders), vocab_size), **special_fields(tokenizer, config)}
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    if max(by_id) >= vocab_size:
        raise GGUFError(f"the tokenizer has ids up to {max(by_id)} but the model's vocabulary has {vocab_size} rows")
    added = tokenizer.added_tokens_decoder  # id -> AddedToken
    tokens, types = [], []
    for i in range(vocab_size):  # rows the tokenizer never uses (padding of the embedding) are marked unused
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif i in added:
            tokens.append(text)
            types.append(TokenType.CONTROL if added[i].special or _looks_like_control(text) else TokenType.USER_DEFINED)
        else:
            tokens.append(text)
            types.append(TokenType.NORMAL)
    merges = []
    for m in tj["model"]["merges"]:
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        # GGUF keeps a merge as one string split at its space; a space inside a part is stored shifted by 256
        merges.append(" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in (left, right)))
    return {"model": "gpt2", "pre": pre, "tokens": tokens, "types": [int(t) for t in types], "merges": merges,
            **special_fields(tokenizer, config)}


def add_tokenizer(writer, f: dict[str, Any]) -> None:
    writer.add_tokenizer_model(f["model"])
    writer.add_tokenizer_pre(f["pre"])
    writer.add_token_list(f["tokens"])
    if f.get("scores") is not None:  # SentencePiece: llama.cpp merges pieces by these
        writer.add_token_scores(f["scores"])
    writer.add_token_types(f["types"])
    if f.get("merges"):
        writer.add_token_merges(f["merges"])
    for key, value in (f.get("flags") or {}).items():  # add_space_prefix and the like, as the source file had them
        getattr(writer, f"add_{key}")(value)
    if f["bos"] is not None:
        writer.add_bos_token_id(f["bos"])
    writer.add_eos_token_id(f["eos"])
    # the end of a chat turn is the eos prepare_tokenizer chose; naming it stops llama.cpp guessing it by text
    writer.add_eot_token_id(f["eos"])
    if f["pad"] is not None:
        writer.add_pad_token_id(f["pad"])
    if f["unk"] is not None:
        writer.add_unk_token_id(f["unk"])
    writer.add_add_bos_token(f["add_bos"])
    writer.add_add_eos_token(f["add_eos"])
    if f["chat_template"]:
        template = f["chat_template"]
        if isinstance(template, dict):  # several named templates: "default" first, as llama.cpp reads them
            template = [{"name": k, "template": v} for k, v in sorted(template.items(), key=lambda kv: kv[0] != "default")]
        writer.add_chat_template(template)


__all__ = ["PRE_TOKENIZERS", "GGUFError", "add_tokenizer", "check_tokenizer", "is_sentencepiece", "pre_tokenizer_name",
           "prepared_tokenizer", "special_fields", "tokenizer_fields"]
