"""Check a GGUF file by loading it back: in transformers always, in llama.cpp when llama-cpp-python is installed.

    from unsloth_grpo.export.gguf_check import verify_gguf
    check = verify_gguf("exports/smoke", "exports/smoke-gguf/model-f16.gguf", "f16")
    print(*check.summary(), sep="\\n"); check.ok

Three questions, each with its own measure:

1. **Does the file hold the merged model?** transformers reads it (``from_pretrained(folder,
   gguf_file=...)``, its own tensor names, its own undoing of the q/k reordering, dequantized to fp32).
   Every weight must equal the merged weight rounded to the type it was written in (bit for bit), and
   every hyperparameter transformers reads must equal config.json's. This holds for every model and
   type; a wrong layout, name or setting fails it.
2. **How much does the type lose?** The file's logits (in transformers) against the merged model's on a
   few chat prompts, as a share of the merged model's largest logit, against :data:`GGUF_TOLERANCE`.
   The share grows with the size of a model's weights: bf16 and q8_0 round the tiny smoke model's large
   weights so much that its answers change, and the check says so (use f16 there).
3. **Does llama.cpp run it as transformers does?** With llama-cpp-python (the optional extra): the chat
   template *stored in the file*, rendered and tokenized by the file's tokenizer, must give the token ids
   transformers gives (``apply_chat_template`` with the merged folder's tokenizer); llama.cpp's logits
   must match transformers' on the same file within :data:`LLAMA_CPP_TOLERANCE` (llama.cpp computes with
   16-bit activations and cache); and greedy answers must be the same tokens, except where transformers'
   two best tokens are closer than twice the largest logit difference just measured (a near-tie that
   difference alone can swap). How often llama.cpp's answer equals the merged model's is reported too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

#: Question 2's tolerance for each GGUF type: the file's logits against the merged model's, as a share
#: of the merged model's largest absolute logit. Measured with ``export --gguf DIR --quant TYPE --verify``
#: (docs/export.md): a 4-step SmolLM2-135M-Instruct run loses 1.3e-3 (f16), 8.2e-3 (bf16) and 3.4e-2
#: (q8_0); one smoke run's tiny model, whose weights are large, 5.6e-3, 6.7e-2 and 2.2e-1, and under q8_0
#: its greedy answers change. f32 is bit-exact. The f16 and bf16 values are the merge check's
#: (VERIFY_TOLERANCE).
GGUF_TOLERANCE = {"f32": 1e-5, "f16": 2e-2, "bf16": 5e-2, "q8_0": 1e-1}

#: The same for the k-quants llama.cpp's quantizer makes: the SmolLM2 run loses 2.0e-1 at q4_k_m.
KQUANT_TOLERANCE = 0.3

#: Question 3's tolerance: llama.cpp's logits against transformers' on the same file, as a share of the
#: largest logit. llama.cpp keeps activations and its attention cache in 16 bits and quantizes the
#: activations that meet q8_0 and k-quant matrices; measured (docs/export.md) 1.4e-3 (f32), 1.4e-3
#: (f16), 8.9e-3 (bf16), 5.3e-2 (q8_0) and 7.9e-2 (q4_k_m) on the SmolLM2 run, and 3.4e-3, 1.7e-2,
#: 3.1e-2 and 5.4e-2 on the smoke model. A setting llama.cpp reads otherwise than transformers (rope,
#: head size, layout) moves the logits by about their scale.
LLAMA_CPP_TOLERANCE = {"f32": 1e-2, "f16": 5e-2, "bf16": 1e-1, "q8_0": 1.5e-1}
KQUANT_LLAMA_CPP_TOLERANCE = 0.2

#: Chat prompts the checks run on.
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


def llama_cpp_tolerance(quant: str) -> float:
    return LLAMA_CPP_TOLERANCE.get(quant, KQUANT_LLAMA_CPP_TOLERANCE)


def _messages(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]


@dataclass
class TransformersCheck:
    tensors: int  # weights compared
    weights_max_diff: float  # largest |file - merged rounded to the file's type| over every weight
    weights_worst: str  # the tensor where it is
    max_abs_diff: float  # logits, file against merged
    max_abs_logit: float
    argmax_agreement: float  # share of positions whose top token is the same
    filled: list[str] = field(default_factory=list)  # what transformers does not read from GGUF, taken from config.json
    mismatched: list[str] = field(default_factory=list)  # hyperparameters the file gets wrong
    rounding_checked: bool = True  # False for a k-quant, whose rounding is llama.cpp's own

    @property
    def share(self) -> float:
        return self.max_abs_diff / max(self.max_abs_logit, 1e-12)

    @property
    def holds_the_model(self) -> bool:
        return not self.mismatched and (not self.rounding_checked or self.weights_max_diff == 0.0)


@dataclass
class LlamaCppCheck:
    prompts: int
    template_tokens_equal: int  # prompts whose ids from the file's template + tokenizer equal transformers'
    max_abs_diff: float  # llama.cpp's logits against transformers' on the same file
    max_abs_logit: float
    greedy_equal: int  # greedy answers equal to transformers' on the same file
    near_ties: int  # ... parting where transformers' two best tokens are closer than the engines' logits differ
    widest_tie: float  # the largest gap between those two tokens among the near-ties, in logits
    greedy_equal_merged: int  # greedy answers equal to the merged model's (what the type's rounding leaves)
    max_new_tokens: int
    answers: list[tuple[str, str]] = field(default_factory=list)  # (llama.cpp, transformers on the merged model)
    first_difference: str = ""

    @property
    def share(self) -> float:
        return self.max_abs_diff / max(self.max_abs_logit, 1e-12)


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
        return self.transformers.share <= self.tolerance

    @property
    def llama_cpp_ok(self) -> bool:
        c = self.llama_cpp
        return c is None or (c.template_tokens_equal == c.prompts and c.share <= llama_cpp_tolerance(self.quant)
                             and c.greedy_equal + c.near_ties == c.prompts)

    @property
    def ok(self) -> bool:
        return self.transformers.holds_the_model and self.logits_ok and self.llama_cpp_ok

    def summary(self) -> list[str]:
        t = self.transformers
        if t.mismatched:
            held = f"EXCEEDED, hyperparameters differ from config.json: {', '.join(t.mismatched)}"
        elif t.rounding_checked and t.weights_max_diff != 0.0:
            held = (f"EXCEEDED, weights differ from the merged ones rounded to the file's types by up to "
                    f"{t.weights_max_diff:.2e} ({t.weights_worst})")
        else:
            held = "ok"
        what = ("equal the merged weights rounded to the file's types, bit for bit" if t.rounding_checked
                else "read (their rounding is llama.cpp's, not compared weight by weight)")
        lines = [f"gguf ({self.quant}) read back by transformers: {t.tensors} weights {what}; hyperparameters as "
                 f"config.json" + (f" (not read from GGUF by transformers, taken from config.json: "
                                   f"{', '.join(t.filled)})" if t.filled else "") + f": {held}"]
        loss = (f"gguf ({self.quant}) vs merged logits: max abs diff {t.max_abs_diff:.2e} ({t.share:.1e} of the largest "
                f"logit, {t.max_abs_logit:.1f}; top token agrees at {t.argmax_agreement:.0%} of positions); "
                f"{self.quant} tolerance {self.tolerance:g} of it")
        if self.logits_ok:
            loss += ": ok"
        else:
            loss += (f": EXCEEDED. {self.quant} rounds this model's weights too coarsely to compute what the merged "
                     "model computes" + ("; f32 is written bit-exact, so the file is wrong" if self.quant == "f32"
                                         else "; use --quant f16"))
        lines.append(loss)
        c = self.llama_cpp
        if c is None:
            lines.append(f"gguf in llama.cpp: not checked ({self.llama_cpp_skipped})")
        else:
            verdict = "ok" if self.llama_cpp_ok else "EXCEEDED" + (f" ({c.first_difference})" if c.first_difference else "")
            ties = (f" ({c.near_ties} parting at a near-tie: transformers' two best tokens {c.widest_tie:.2f} apart at "
                    f"most, under twice the logit difference, {2 * c.max_abs_diff:.2f})") if c.near_ties else ""
            lines.append(f"gguf in llama.cpp: the file's chat template and tokenizer give transformers' prompt ids on "
                         f"{c.template_tokens_equal}/{c.prompts} prompts; logits vs transformers on the same file: max "
                         f"abs diff {c.max_abs_diff:.2e} ({c.share:.1e} of the largest logit, tolerance "
                         f"{llama_cpp_tolerance(self.quant):g}); greedy answers of {c.max_new_tokens} tokens at most "
                         f"equal to transformers' on the same file {c.greedy_equal}/{c.prompts}{ties}, to the merged "
                         f"model's {c.greedy_equal_merged}/{c.prompts}: {verdict}")
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

    from unsloth_grpo.export.gguf_writer import head_dim

    gguf_file = Path(gguf_file)
    merged = AutoConfig.from_pretrained(str(merged_dir))
    read = AutoConfig.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    mismatched = [f"{k} {getattr(read, k, None)} (config.json {getattr(merged, k, None)})" for k in _CHECKED_FIELDS
                  if getattr(read, k, None) != getattr(merged, k, None)]
    a, b = float(read.rms_norm_eps), float(merged.rms_norm_eps)
    if abs(a - b) > 1e-6 * abs(b):  # the file keeps it as float32
        mismatched.append(f"rms_norm_eps {a} (config.json {b})")
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
    if merged.model_type == "gemma3_text":
        _fill_gemma3(read, merged, filled, mismatched)
    if read.model_type == "mistral":  # transformers 5.17 names no Mistral tensors in GGUF; llama.cpp runs it as llama
        read = LlamaConfig(**{k: v for k, v in read.to_dict().items() if k not in ("model_type", "sliding_window")})
        filled.append("read as llama, since transformers cannot load Mistral from GGUF")
    model = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, config=read,
                                                 dtype=torch.float32)
    return model.eval(), filled, mismatched


def _fill_gemma3(read, merged, filled: list[str], mismatched: list[str]) -> None:
    """Gemma 3 settings beyond :data:`_CHECKED_FIELDS`. transformers' GGUF reader does not read
    ``query_pre_attn_scalar`` and gives the 270M model's 256 to every file; the writer writes only configs
    where it equals the head width (``attention.key_length``, which llama.cpp scales queries by), so it is
    taken from config.json. Head width, sliding window, layer pattern and both rope bases must be read as
    config.json has them (``rope_parameters`` is keyed by layer type, which the common check does not see)."""
    if getattr(read, "query_pre_attn_scalar", None) != merged.query_pre_attn_scalar:
        read.query_pre_attn_scalar = merged.query_pre_attn_scalar
        filled.append("query_pre_attn_scalar (the file's attention.key_length)")
    for key in ("head_dim", "sliding_window", "layer_types"):
        if getattr(read, key, None) != getattr(merged, key, None):
            mismatched.append(f"{key} {getattr(read, key, None)} (config.json {getattr(merged, key, None)})")
    theirs, ours = getattr(read, "rope_parameters", None) or {}, getattr(merged, "rope_parameters", None) or {}
    for kind in ("full_attention", "sliding_attention"):
        a, b = (theirs.get(kind) or {}).get("rope_theta"), (ours.get(kind) or {}).get("rope_theta")
        if a != b:
            mismatched.append(f"{kind} rope_theta {a} (config.json {b})")
    scaled = ours.get("full_attention") or {}
    if (scaled.get("rope_type") or "default") != "default" and theirs.get("full_attention") != scaled:
        read.rope_parameters = {**theirs, "full_attention": dict(scaled)}
        filled.append(f"global layers' rope scaling ({scaled.get('rope_type')})")


def compare_weights(gguf_model, merged_model, types: dict) -> tuple[int, float, str]:
    """(tensors compared, largest |difference|, where) between the file's weights as transformers read them
    and the merged weights rounded to the type each was written in (``types``: HF name -> GGML type).

    A Gemma norm weight ``w`` is written as the float32 ``w + 1`` and read back by transformers as that minus
    one, which is ``w`` only when the sum rounded nothing away (the built-in checkpoint's norms, which came
    from a file, do; a trained one's need not: up to half an ulp of 1, 6e-8). Its reference is that round trip."""
    import gguf
    import torch

    from unsloth_grpo.export.gguf_gemma3 import is_norm, plus_one

    norms_plus_one = getattr(merged_model.config, "model_type", None) == "gemma3_text"
    theirs = gguf_model.state_dict()
    worst, where, n = 0.0, "", 0
    for name, w in merged_model.state_dict().items():
        if name not in types:  # a tied lm_head: the file holds the embedding once
            continue
        qtype = types[name]
        data = w.float().numpy()
        shift = norms_plus_one and is_norm(name)
        if shift:
            data = plus_one(data)
        ref = gguf.quants.dequantize(gguf.quants.quantize(data, qtype), qtype).reshape(w.shape)
        if shift:
            ref = ref - 1  # as transformers' GGUF reader does (float32)
        diff = float((theirs[name].float() - torch.from_numpy(ref)).abs().max())
        n += 1
        if diff > worst:
            worst, where = diff, name
    return n, worst, where


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
    """Why llama.cpp cannot run here, or None when llama-cpp-python is installed."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return (f"llama-cpp-python is not installed ({exc}): pip install 'unsloth-grpo[gguf]' (docs/export.md gives "
                "the build flags for this kind of CPU)")
    return None


def open_in_llama_cpp(gguf_file: Path, n_ctx: int = 1024, logits_all: bool = False):
    from llama_cpp import Llama

    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or None
    return Llama(model_path=str(gguf_file), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False,
                 seed=0, logits_all=logits_all)


def file_prompt_ids(llm, prompt: str) -> list[int]:
    """The prompt as llama.cpp sees it: rendered with the chat template stored in the file, tokenized by the
    file's tokenizer (special tokens parsed, a bos added only if the file asks for one)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise ValueError("the file has no chat template")
    piece = lambda i: llm.detokenize([i], special=True).decode("utf-8", "replace") if i >= 0 else ""  # noqa: E731
    fmt = Jinja2ChatFormatter(template=template, eos_token=piece(llm.token_eos()), bos_token=piece(llm.token_bos()))
    text = fmt(messages=_messages(prompt)).prompt
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)


def _llama_cpp_logits(llm, ids: list[int]):
    """llama.cpp's logits at every position of ``ids``, from a fresh context."""
    import numpy as np

    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float32)


def _greedy_llama_cpp(llm, ids: list[int], max_new_tokens: int, eos: int) -> list[int]:
    """The top token at each step by llama.cpp's logits (no sampler), up to and including ``eos``."""
    import numpy as np

    llm.reset()
    llm.eval(ids)
    out: list[int] = []
    while len(out) < max_new_tokens:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(token)
        if token == eos:
            break
        llm.eval([token])
    return out


def _greedy_transformers(model, tokenizer, ids, max_new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def compare_with_llama_cpp(gguf_file: Path, gguf_model, merged_model, tokenizer, quant: str, prompts=PROMPTS,
                           max_new_tokens: int = 32) -> LlamaCppCheck:
    """The file in llama.cpp against the same file in transformers: prompt ids, logits, greedy answers.

    Greedy answers may part where transformers' two best tokens are closer than twice the largest logit
    difference measured between the two on the prompts (then that difference alone can swap them): such
    a parting is counted as a near-tie, any other as a failure."""
    import torch

    llm = open_in_llama_cpp(gguf_file, logits_all=True)
    check = LlamaCppCheck(len(prompts), 0, 0.0, 0.0, 0, 0, 0.0, 0, max_new_tokens)

    def note(text: str) -> None:
        check.first_difference = check.first_difference or text

    try:
        encoded = [_prompt_ids(tokenizer, prompt) for prompt in prompts]
        for prompt, ids in zip(prompts, encoded):
            flat = ids[0].tolist()
            theirs = file_prompt_ids(llm, prompt)
            if theirs == flat:
                check.template_tokens_equal += 1
            else:
                note(f"prompt {prompt!r}: llama.cpp's ids {theirs[:12]}... differ from transformers' {flat[:12]}...")
            with torch.no_grad():
                ref = gguf_model(input_ids=ids).logits[0].float().numpy()
            mine = _llama_cpp_logits(llm, flat)
            check.max_abs_diff = max(check.max_abs_diff, float(abs(mine - ref).max()))
            check.max_abs_logit = max(check.max_abs_logit, float(abs(ref).max()))
        for prompt, ids in zip(prompts, encoded):
            flat = ids[0].tolist()
            cpp = _greedy_llama_cpp(llm, flat, max_new_tokens, tokenizer.eos_token_id)
            same_file = _greedy_transformers(gguf_model, tokenizer, ids, max_new_tokens)
            merged = _greedy_transformers(merged_model, tokenizer, ids, max_new_tokens)
            check.greedy_equal_merged += cpp == merged
            check.answers.append((tokenizer.decode(cpp, skip_special_tokens=True),
                                  tokenizer.decode(merged, skip_special_tokens=True)))
            if cpp == same_file:
                check.greedy_equal += 1
                continue
            at = next((i for i, (x, y) in enumerate(zip(cpp, same_file)) if x != y), None)
            if at is not None:  # where they part: how far apart were the two tokens for transformers?
                with torch.no_grad():
                    step = gguf_model(input_ids=torch.tensor([flat + same_file[:at]])).logits[0, -1].float()
                margin = float(step[same_file[at]] - step[cpp[at]])
                if margin <= 2 * check.max_abs_diff:
                    check.near_ties += 1
                    check.widest_tie = max(check.widest_tie, margin)
                    continue
                note(f"prompt {prompt!r}: greedy answers part at token {at}, where transformers prefers its token by "
                     f"{margin:.2f}, more than twice the largest logit difference ({check.max_abs_diff:.2f}): llama.cpp "
                     f"{tokenizer.decode(cpp)!r} vs transformers {tokenizer.decode(same_file)!r}")
            else:
                note(f"prompt {prompt!r}: one greedy answer stops before the other: llama.cpp {tokenizer.decode(cpp)!r} "
                     f"vs transformers {tokenizer.decode(same_file)!r}")
    finally:
        llm.close()
    return check


# ---------------------------------------------------------------- all three


def verify_gguf(merged_dir: str | os.PathLike, gguf_file: str | os.PathLike, quant: str, *, prompts=PROMPTS,
                llama_cpp: bool | None = None, max_new_tokens: int = 32) -> GGUFVerification:
    """Load ``gguf_file`` back and compare it with the merged model in ``merged_dir`` (see the module's doc).

    ``llama_cpp``: None runs llama.cpp when it is installed; False never; True requires it."""
    import torch
    from transformers import AutoModelForCausalLM

    from unsloth_grpo.export.gguf_vocab import prepared_tokenizer
    from unsloth_grpo.export.gguf_writer import DIRECT_QUANTS, tensor_types

    merged_dir, gguf_file = Path(merged_dir), Path(gguf_file)
    tokenizer = prepared_tokenizer(merged_dir)
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32).eval()
    gguf_model, filled, mismatched = load_gguf_in_transformers(gguf_file, merged_dir)
    direct = quant in DIRECT_QUANTS
    n, wdiff, where = compare_weights(gguf_model, merged, tensor_types(merged_dir, quant)) if direct else \
        (len(tensor_types(merged_dir, "f16")), 0.0, "")
    diff, largest, agreement = compare_logits_with_merged(gguf_model, merged, tokenizer, prompts)
    t = TransformersCheck(n, wdiff, where, diff, largest, agreement, filled, mismatched, rounding_checked=direct)
    missing = llama_cpp_missing()
    if llama_cpp is False or (missing and llama_cpp is None):
        return GGUFVerification(quant, t, None, "not asked for" if llama_cpp is False else missing)
    if missing:
        raise RuntimeError(missing)
    c = compare_with_llama_cpp(gguf_file, gguf_model, merged, tokenizer, quant, prompts, max_new_tokens)
    return GGUFVerification(quant, t, c)


__all__ = ["GGUF_TOLERANCE", "GGUFVerification", "KQUANT_TOLERANCE", "LLAMA_CPP_TOLERANCE", "LlamaCppCheck",
           "PROMPTS", "TransformersCheck", "compare_weights", "compare_with_llama_cpp", "file_prompt_ids",
           "llama_cpp_missing", "llama_cpp_tolerance", "load_gguf_in_transformers", "open_in_llama_cpp", "tolerance",
           "verify_gguf"]
