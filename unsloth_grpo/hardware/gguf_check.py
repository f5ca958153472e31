"""Check a GGUF file by loading it back: in transformers always, in llama.cpp when llama-cpp-python is installed.

    from unsloth_grpo.hardware.gguf_check import verify_gguf
    check = verify_gguf("exports/smoke", "exports/smoke-gguf/model-q8_0.gguf", "q8_0")
    print(check.summary()); check.ok

1. **transformers** reads the file (``from_pretrained(folder, gguf_file=...)``, which dequantizes it to
   fp32) and its logits are compared with the merged model's on a few chat prompts. The difference is
   measured as a share of the merged model's largest logit, against :data:`GGUF_TOLERANCE` for the
   file's type. The hyperparameters transformers reads from the file must equal the merged config's.
2. **llama.cpp** (``llama_cpp``, the optional extra) loads the file, renders the same prompts with the
   chat template *from the file* and tokenizes them with the tokenizer *from the file*: the token ids
   must equal transformers' (``apply_chat_template`` with the merged folder's tokenizer). Then both
   answer greedily: llama.cpp with the file, transformers with the same file's weights, and the answers
   must be the same tokens. How far each also agrees with the merged model is reported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

#: ``--verify``'s tolerance for each GGUF type, as a share of the merged model's largest absolute logit.
#: Measured with ``export --gguf --verify`` (docs/export.md): the largest correct conversion seen was
#: f32 0 (bit-exact), f16 4.6e-3, bf16 3.9e-2 and q8_0 ... of the largest logit (the tiny smoke model,
#: whose weights are large, sets the worst case); a file whose q/k rows are not reordered for llama.cpp
#: is off by about the whole logit scale.
GGUF_TOLERANCE = {"f32": 1e-5, "f16": 2e-2, "bf16": 1e-1, "q8_0": 2e-1}

#: k-quants (made by llama.cpp's quantizer) are checked against this share; they lose more than q8_0.
KQUANT_TOLERANCE = 0.5

#: Chat prompts both checks run on.
PROMPTS = (
    "What is 15 + 27?",
    "Tom has 38 apples and buys 24 more. How many apples does he have now?",
    "Name three colours.",
)

#: hyperparameters that must agree between the merged config and what transformers reads from the file
_CHECKED_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                   "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings")


def tolerance(quant: str) -> float:
    return GGUF_TOLERANCE.get(quant, KQUANT_TOLERANCE)


def _messages(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]


@dataclass
class TransformersCheck:
    max_abs_diff: float
    max_abs_logit: float
    argmax_agreement: float  # share of positions whose top token is the same
    filled: list[str] = field(default_factory=list)  # fields transformers does not read from GGUF, taken from config.json
    mismatched: list[str] = field(default_factory=list)  # fields the file gets wrong

    @property
    def share(self) -> float:
        return self.max_abs_diff / max(self.max_abs_logit, 1e-12)


@dataclass
class LlamaCppCheck:
    prompts: int
    template_tokens_equal: int  # prompts whose ids from the file's template + tokenizer equal transformers'
    greedy_equal: int  # prompts whose greedy answer (llama.cpp, the file) equals transformers' on the file's weights
    greedy_equal_merged: int  # ... equals transformers' on the merged model
    max_new_tokens: int
    answers: list[tuple[str, str]] = field(default_factory=list)  # (llama.cpp, transformers) answer texts
    first_difference: str = ""


@dataclass
class GGUFVerification:
    quant: str
    transformers: TransformersCheck
    llama_cpp: LlamaCppCheck | None
    llama_cpp_skipped: str = ""  # why llama.cpp did not run

    @property
    def tolerance(self) -> float:
        return tolerance(self.quant)

    @property
    def logits_ok(self) -> bool:
        return self.transformers.share <= self.tolerance and not self.transformers.mismatched

    @property
    def llama_cpp_ok(self) -> bool:
        c = self.llama_cpp
        return c is None or (c.template_tokens_equal == c.prompts and c.greedy_equal == c.prompts)

    @property
    def ok(self) -> bool:
        return self.logits_ok and self.llama_cpp_ok

    def summary(self) -> list[str]:
        t = self.transformers
        line = (f"gguf ({self.quant}) read by transformers vs merged logits: max abs diff {t.max_abs_diff:.2e} "
                f"({t.share:.1e} of the largest logit, {t.max_abs_logit:.1f}; top token agrees at "
                f"{t.argmax_agreement:.0%} of positions); {self.quant} tolerance {self.tolerance:g} of it")
        if t.mismatched:
            line += f": EXCEEDED, the file's metadata differs from config.json: {', '.join(t.mismatched)}"
        elif t.share > self.tolerance:
            line += (": EXCEEDED. The file does not compute what the merged model computes"
                     + ("; bf16 rounds this model's weights too coarsely: use --quant f16 or q8_0"
                        if self.quant == "bf16" else ""))
        else:
            line += ": ok"
        if t.filled:
            line += f" (not read from GGUF by transformers, taken from config.json: {', '.join(t.filled)})"
        lines = [line]
        c = self.llama_cpp
        if c is None:
            lines.append(f"gguf in llama.cpp: not checked ({self.llama_cpp_skipped})")
        else:
            verdict = "ok" if self.llama_cpp_ok else f"EXCEEDED ({c.first_difference})"
            lines.append(f"gguf in llama.cpp: chat template and tokenizer from the file give transformers' prompt ids "
                         f"on {c.template_tokens_equal}/{c.prompts} prompts; greedy answers ({c.max_new_tokens} tokens at "
                         f"most) equal to transformers' on the file's weights {c.greedy_equal}/{c.prompts}, on the merged "
                         f"model {c.greedy_equal_merged}/{c.prompts}: {verdict}")
        return lines


# ---------------------------------------------------------------- transformers


def load_gguf_in_transformers(gguf_file: Path, merged_dir: Path):
    """(model, filled, mismatched): the file read by transformers with the config it reads from the file.

    transformers' GGUF reader skips a few fields this writer does write (Qwen3's ``head_dim``, which it
    takes from a default; rope scaling) and maps Mistral to a class whose tensors it cannot name; those
    are taken from the merged config, and named in ``filled``. Every other checked field it reads must
    equal the merged config's, or it is listed in ``mismatched``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    from unsloth_grpo.hardware.gguf_writer import head_dim

    gguf_file = Path(gguf_file)
    merged = AutoConfig.from_pretrained(str(merged_dir))
    read = AutoConfig.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    mismatched = [f"{k} {getattr(read, k, None)} (config.json {getattr(merged, k, None)})" for k in _CHECKED_FIELDS
                  if getattr(read, k, None) != getattr(merged, k, None)]
    for k in ("rms_norm_eps",):
        a, b = float(getattr(read, k)), float(getattr(merged, k))
        if abs(a - b) > 1e-6 * abs(b):
            mismatched.append(f"{k} {a} (config.json {b})")
    theta = lambda cfg: (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", None))  # noqa: E731
    if theta(read) != theta(merged):
        mismatched.append(f"rope_theta {theta(read)} (config.json {theta(merged)})")
    filled = []
    merged_dict = merged.to_dict()
    if merged.model_type == "qwen3" and getattr(read, "head_dim", None) != head_dim(merged_dict):
        read.head_dim = head_dim(merged_dict)
        filled.append("head_dim")
    rope = getattr(merged, "rope_parameters", None) or {}
    if (rope.get("rope_type") or "default") != "default":
        read.rope_parameters = dict(rope)
        filled.append(f"rope scaling ({rope.get('rope_type')})")
    if read.model_type == "mistral":  # transformers 5.17 names no Mistral tensors in GGUF; llama.cpp runs it as llama
        read = LlamaConfig(**{k: v for k, v in read.to_dict().items() if k not in ("model_type", "sliding_window")})
        filled.append("read as llama (transformers cannot load Mistral from GGUF)")
    model = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, config=read,
                                                 dtype=torch.float32)
    return model.eval(), filled, mismatched


def _prompt_ids(tokenizer, prompt: str):
    return tokenizer.apply_chat_template(_messages(prompt), add_generation_prompt=True, return_tensors="pt",
                                         return_dict=True)["input_ids"]


def compare_logits_with_merged(gguf_model, merged_model, tokenizer, prompts=PROMPTS) -> tuple[float, float, float]:
    """(largest |difference|, largest |merged logit|, top-token agreement) over every position of ``prompts``."""
    import torch

    worst = largest = 0.0
    agree = total = 0
    with torch.no_grad():
        for prompt in prompts:
            ids = _prompt_ids(tokenizer, prompt)
            a = merged_model(input_ids=ids).logits.float()
            b = gguf_model(input_ids=ids).logits.float()
            worst = max(worst, (a - b).abs().max().item())
            largest = max(largest, a.abs().max().item())
            agree += int((a.argmax(-1) == b.argmax(-1)).sum())
            total += a.shape[1]
    return worst, largest, agree / max(total, 1)


# ---------------------------------------------------------------- llama.cpp


def llama_cpp_missing() -> str | None:
    """Why llama.cpp cannot run here, or None when llama-cpp-python imports."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        return ("llama-cpp-python is not installed: pip install 'unsloth-grpo[gguf]' (docs/export.md gives the "
                "build flags for this kind of CPU)")
    return None


def _greedy_transformers(model, tokenizer, ids, max_new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def _greedy_llama_cpp(llm, ids: list[int], max_new_tokens: int, eos: int) -> list[int]:
    """Greedy tokens from llama.cpp for the prompt ``ids``, up to and including ``eos``."""
    llm.reset()
    out = []
    for token in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        out.append(int(token))
        if token == eos or llm.token_eos() == token or len(out) >= max_new_tokens:
            break
    return out


def open_in_llama_cpp(gguf_file: Path, n_ctx: int = 1024):
    from llama_cpp import Llama

    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
    return Llama(model_path=str(gguf_file), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False,
                 seed=0)


def file_prompt_ids(llm, prompt: str) -> list[int]:
    """The prompt as llama.cpp sees it: rendered with the chat template stored in the file, tokenized by the
    file's tokenizer (special tokens parsed, a bos added only if the file asks for one)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    meta = llm.metadata
    template = meta.get("tokenizer.chat_template")
    if not template:
        raise ValueError("the file has no chat template")
    piece = lambda i: llm.detokenize([i], special=True).decode("utf-8", "replace") if i >= 0 else ""  # noqa: E731
    fmt = Jinja2ChatFormatter(template=template, eos_token=piece(llm.token_eos()), bos_token=piece(llm.token_bos()))
    text = fmt(messages=_messages(prompt)).prompt
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)


def compare_with_llama_cpp(gguf_file: Path, gguf_model, merged_model, tokenizer, prompts=PROMPTS,
                           max_new_tokens: int = 32) -> LlamaCppCheck:
    llm = open_in_llama_cpp(gguf_file)
    check = LlamaCppCheck(len(prompts), 0, 0, 0, max_new_tokens)
    try:
        for prompt in prompts:
            ids = _prompt_ids(tokenizer, prompt)
            theirs = file_prompt_ids(llm, prompt)
            if theirs == ids[0].tolist():
                check.template_tokens_equal += 1
            elif not check.first_difference:
                check.first_difference = (f"prompt {prompt!r}: llama.cpp's ids {theirs[:12]}... differ from "
                                          f"transformers' {ids[0].tolist()[:12]}...")
            cpp = _greedy_llama_cpp(llm, ids[0].tolist(), max_new_tokens, tokenizer.eos_token_id)
            same_weights = _greedy_transformers(gguf_model, tokenizer, ids, max_new_tokens)
            merged = _greedy_transformers(merged_model, tokenizer, ids, max_new_tokens)
            check.greedy_equal += cpp == same_weights
            check.greedy_equal_merged += cpp == merged
            check.answers.append((tokenizer.decode(cpp, skip_special_tokens=True),
                                  tokenizer.decode(same_weights, skip_special_tokens=True)))
            if cpp != same_weights and not check.first_difference:
                at = next((i for i, (x, y) in enumerate(zip(cpp, same_weights)) if x != y), min(len(cpp), len(same_weights)))
                check.first_difference = (f"prompt {prompt!r}: greedy answers part at token {at}: llama.cpp "
                                          f"{tokenizer.decode(cpp)!r} vs transformers {tokenizer.decode(same_weights)!r}")
    finally:
        llm.close()
    return check


# ---------------------------------------------------------------- both


def verify_gguf(merged_dir: str | os.PathLike, gguf_file: str | os.PathLike, quant: str, *, prompts=PROMPTS,
                llama_cpp: bool | None = None, max_new_tokens: int = 32) -> GGUFVerification:
    """Load ``gguf_file`` back and compare it with the merged model in ``merged_dir`` (see the module's doc).

    ``llama_cpp``: None runs llama.cpp when it is installed; False never; True requires it."""
    import torch
    from transformers import AutoModelForCausalLM

    from unsloth_grpo.hardware.gguf_writer import prepared_tokenizer

    merged_dir, gguf_file = Path(merged_dir), Path(gguf_file)
    tokenizer = prepared_tokenizer(merged_dir)
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32).eval()
    gguf_model, filled, mismatched = load_gguf_in_transformers(gguf_file, merged_dir)
    diff, largest, agreement = compare_logits_with_merged(gguf_model, merged, tokenizer, prompts)
    t = TransformersCheck(diff, largest, agreement, filled, mismatched)
    missing = llama_cpp_missing()
    if llama_cpp is False or (missing and llama_cpp is None):
        return GGUFVerification(quant, t, None, "not asked for" if llama_cpp is False else missing)
    if missing:
        raise RuntimeError(missing)
    c = compare_with_llama_cpp(gguf_file, gguf_model, merged, tokenizer, prompts, max_new_tokens)
    return GGUFVerification(quant, t, c)


__all__ = ["GGUF_TOLERANCE", "GGUFVerification", "KQUANT_TOLERANCE", "LlamaCppCheck", "PROMPTS", "TransformersCheck",
           "compare_with_llama_cpp", "file_prompt_ids", "llama_cpp_missing", "load_gguf_in_transformers",
           "open_in_llama_cpp", "tolerance", "verify_gguf"]
