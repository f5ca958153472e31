"""A SentencePiece vocabulary for a GGUF file, taken from the GGUF file the model was converted from.

    from unsloth_grpo.export.gguf_spm import find_kept_vocab, spm_fields
    kept = find_kept_vocab(tokenizer, [Path("exports/merged")])   # None when no kept vocabulary matches
    spm_fields(kept, vocab_size=262144)["scores"][494]            # -0.0

llama.cpp runs a SentencePiece tokenizer (its ``llama`` tokenizer model) from every piece's text, score
and type: it joins neighbouring pieces by the score of the piece they make. A tokenizer.json holds no
scores (the built-in Gemma 3 tokenizer is a BPE whose merges were ordered by them), and Gemma's piece
scores are not a function of anything it does hold, so they are not rebuilt here. Instead the built-in
model's conversion (:func:`unsloth_grpo.models.pretrained.keep_gguf_vocab`) keeps the source file's
``tokenizer.ggml.*`` entries in ``gguf_tokenizer.json`` beside the checkpoint, and the export writes
pieces, scores, types and flags back from there. The file is used only when its pieces are the
tokenizer's, id for id (a tokenizer with tokens added in training does not match and is refused);
bos/eos/pad/unk and the chat template stay the tokenizer's, as for every other export.

Where it is looked for: the folders the caller names (the preflight: the run's tokenizer folder and
the base model; the writer: the merged folder, into which the export copies the file from the run or
the base, since a merge re-saves the tokenizer but not this file), then the checkpoints of the
built-in SentencePiece models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from unsloth_grpo.export.gguf_errors import GGUFError

#: Entries of the kept file that are written back as flags (GGUFWriter's ``add_<name>``).
FLAGS = ("add_space_prefix", "add_sep_token", "remove_extra_whitespaces")


@dataclass
class KeptVocab:
    path: Path
    model: str  # tokenizer.ggml.model ("llama" for SentencePiece)
    pre: str
    tokens: list[str]
    scores: list[float]
    types: list[int]
    flags: dict = field(default_factory=dict)
    source_sha256: str = ""


def _kept_name() -> str:
    from unsloth_grpo.models.pretrained import KEPT_VOCAB

    return KEPT_VOCAB


def candidate_files(folders=()) -> list[Path]:
    """Where a kept vocabulary may be: each of ``folders``, then each built-in SentencePiece model's checkpoint."""
    from unsloth_grpo.models.pretrained import REAL_MODELS
    from unsloth_grpo.models.ref import cache_dir

    name = _kept_name()
    out = [Path(f) / name for f in folders if f is not None]
    out += [cache_dir() / "models" / spec.directory / name for spec in REAL_MODELS.values() if spec.spm_bpe_tokenizer]
    seen, unique = set(), []
    for p in out:
        key = str(p.resolve()) if p.exists() else str(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def carry_kept_vocab(out: Path, folders) -> None:
    """Copy the kept SentencePiece vocabulary (``gguf_tokenizer.json``, the built-in Gemma 3's scores) from the
    first of ``folders`` that has one into the merged folder ``out``. A merge re-saves the tokenizer but not
    that file, so a GGUF written from the merged folder looked only at the built-in checkpoints and refused a
    model whose base was anywhere else, although the preflight had found the file beside that base. Whether
    its pieces are the tokenizer's is the writer's check, as for every other place it is looked for."""
    import shutil

    name = _kept_name()
    out = Path(out)
    if (out / name).exists():
        return
    for folder in folders:
        if folder is not None and (Path(folder) / name).is_file():
            shutil.copyfile(Path(folder) / name, out / name)
            return


def read_kept_vocab(path: str | Path) -> KeptVocab:
    raw = json.loads(Path(path).read_text())
    g = {k.removeprefix("tokenizer.ggml."): v for k, v in raw.items()}
    tokens, scores, types = g.get("tokens"), g.get("scores"), g.get("token_type")
    if not tokens or scores is None or types is None or not len(tokens) == len(scores) == len(types):
        raise GGUFError(f"{path}: not a kept SentencePiece vocabulary (tokens, scores and token_type of one length)")
    return KeptVocab(Path(path), g.get("model", "llama"), g.get("pre", "default"), tokens, [float(s) for s in scores],
                     [int(t) for t in types], {k: g[k] for k in FLAGS if k in g}, raw.get("source_sha256", ""))


def matches(kept: KeptVocab, tokenizer) -> bool:
    """Whether every token of ``tokenizer`` is the kept file's piece of the same id."""
    tokens = kept.tokens
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return bool(vocab) and all(i < len(tokens) and tokens[i] == text for text, i in vocab.items())


def find_kept_vocab(tokenizer, folders=()) -> KeptVocab | None:
    """The first kept vocabulary (see :func:`candidate_files`) whose pieces are the tokenizer's, or None."""
    for path in candidate_files(folders):
        if not path.is_file():
            continue
        try:
            kept = read_kept_vocab(path)
        except (OSError, ValueError, GGUFError):
            continue
        if matches(kept, tokenizer):
            return kept
    return None


def missing_vocab_message(folders=()) -> str:
    where = ", ".join(str(p) for p in candidate_files(folders))
    return ("the tokenizer is a SentencePiece model; the GGUF writer writes one only with the vocabulary (pieces, "
            f"scores, types) of the GGUF file the model came from, kept as {_kept_name()} by the built-in "
            "gemma3-270m's conversion, and none whose pieces are this tokenizer's was found (looked at: "
            f"{where}). Other SentencePiece tokenizers (Llama 2, Mistral 7B v0.1-v0.3) are not written: convert "
            "the merged folder with llama.cpp's convert_hf_to_gguf.py")


def spm_fields(kept: KeptVocab, vocab_size: int) -> dict:
    """The vocabulary part of :func:`unsloth_grpo.export.gguf_vocab.tokenizer_fields` for a SentencePiece model."""
    if len(kept.tokens) != vocab_size:
        raise GGUFError(f"the model's vocabulary has {vocab_size} rows but the kept SentencePiece vocabulary "
                        f"({kept.path}) {len(kept.tokens)}; a resized embedding is not written")
    return {"model": kept.model, "pre": kept.pre, "tokens": list(kept.tokens), "scores": list(kept.scores),
            "types": list(kept.types), "merges": [], "flags": dict(kept.flags)}


__all__ = ["FLAGS", "KeptVocab", "candidate_files", "carry_kept_vocab", "find_kept_vocab", "matches",
           "missing_vocab_message", "read_kept_vocab", "spm_fields"]
