"""From a run to a model you can ship: merge LoRA into the base weights, GGUF, push to the hub.

    unsloth-grpo export --model outputs/smoke --merged exports/smoke --verify
    unsloth-grpo export --model outputs/smoke --gguf exports/smoke-gguf --quant q8_0 --verify
    HF_TOKEN=... unsloth-grpo export --model outputs/run --merged exports/run --push-to-hub me/my-model

``--model`` is a run directory (its final adapter), a checkpoint, or any LoRA adapter directory.
The merge uses Unsloth's ``save_pretrained_merged(save_method="merged_16bit")`` when Unsloth is
the backend (``--backend auto`` picks it on a CUDA machine with Unsloth installed; for a run
trained on 4-bit weights it downloads the base's 16-bit repository and merges the adapter onto
those weights) and peft's ``merge_and_unload`` otherwise, in the dtype the run trained in (an
fp32 run stays fp32; ``--dtype`` chooses another). ``--verify`` compares the merged model's
logits with the adapter model's against a tolerance that fits the merged dtype. The merged
directory holds the weights, the tokenizer with its chat template, and ``reproducibility.json``
(the run's bundle plus how the export was made), and loads with plain
``AutoModelForCausalLM.from_pretrained``.

GGUF is written from the merged weights by :mod:`unsloth_grpo.export.gguf_writer`, offline and
without llama.cpp for f16, bf16 and q8_0 (the k-quants need llama.cpp's quantizer, looked for before
anything is merged), with an Ollama ``Modelfile`` beside the file; with ``--verify`` the file is read
back (:mod:`unsloth_grpo.export.gguf_check`). A GGUF-only export merges into a temporary folder that
is removed afterwards. Nothing is left half-made: a failed export removes all it wrote, and an existing
non-empty target is replaced only with ``--force``, and only when the export succeeds.

The hub token is read from ``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``) and handed to the upload
call only; it is never written to any file.

The export wing: this module is the export itself; the GGUF file is :mod:`.gguf_writer`'s (its
vocabulary :mod:`.gguf_vocab`'s, the Ollama ``Modelfile`` :mod:`.gguf_ollama`'s, the read-back check
:mod:`.gguf_check`'s) and the README beside the weights :mod:`.card`'s. It loads models through
:mod:`unsloth_grpo.hardware.backend`; the hardware wing imports nothing from here.

Example::

    from unsloth_grpo.export import export_model
    result = export_model("outputs/smoke", merged_dir="exports/smoke")
    result.merged_dir, result.method      # (PosixPath('exports/smoke'), 'peft merge_and_unload')
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.config import is_unsloth
from unsloth_grpo.data import looks_like_path
from unsloth_grpo.export.card import model_card, run_dir_of, write_model_card
from unsloth_grpo.export.gguf_spm import carry_kept_vocab

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
#: What ``--backend`` may name: Unsloth's 16-bit merge, or peft's ``merge_and_unload``.
EXPORT_BACKENDS = ("auto", "unsloth", "peft")

class ExportError(RuntimeError):
    """The export cannot proceed; the message names the input at fault and the fix."""


@dataclass
class ExportResult:
    source: Path
    adapter: Path | None
    base_model: str | None
    merged_dir: Path | None
    method: str
    gguf_dir: Path | None = None
    gguf_files: list[Path] = field(default_factory=list)
    pushed_to: str | None = None
    notes: list[str] = field(default_factory=list)
    dtype: str | None = None  # of the merged weights: fp32, bf16 or fp16
    dtype_reason: str = ""  # why that dtype, in words
    gguf_info: Any = None  # gguf_writer.GGUFInfo of the file written
    gguf_check: Any = None  # gguf_check.GGUFVerification, when the export was asked to verify
    gguf_check_error: str = ""  # why the GGUF file could not be read back, when it could not


# ---------------------------------------------------------------- what to export


def resolve_source(model: str | os.PathLike) -> tuple[Path, Path | None]:
    """(directory to export, its adapter directory or None for an already merged/base model)."""
    from unsloth_grpo.runs import unfinished_run

    p = Path(model).expanduser()
    if not p.exists():
        raise ExportError(f"--model {p}: no such directory; pass a run directory, a checkpoint or an adapter")
    if (p / "adapter_config.json").is_file():
        return p, p
    if (p / "config.json").is_file():
        return p, None  # a full model: nothing to merge, it is re-saved (and converted to GGUF if asked)
    unfinished = unfinished_run(p)
    if unfinished is not None:
        raise ExportError(f"--model {unfinished}")
    raise ExportError(f"--model {p}: neither a LoRA adapter (adapter_config.json) nor a model (config.json)")


def adapter_base(adapter: Path, override: str | None = None) -> str:
    """The base model an adapter was trained on (``--base-model`` wins), resolved to a loadable path."""
    from unsloth_grpo.models.ref import model_ref

    if override:
        return model_ref(override).path()
    try:
        base = json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"]
    except (OSError, ValueError, KeyError) as exc:
        raise ExportError(f"{adapter}/adapter_config.json has no readable base_model_name_or_path ({exc}); "
                          "pass --base-model") from None
    if not base:
        raise ExportError(f"{adapter}/adapter_config.json names no base model; pass --base-model")
    if looks_like_path(base) and not Path(base).expanduser().exists():
        raise ExportError(f"the adapter's base model '{base}' is not on this machine; pass --base-model "
                          "PATH_OR_HUB_ID (the same weights the run trained on)")
    return model_ref(base).path()


def _base_dtype(base: str) -> tuple[str, bool]:
    """(dtype name of the base checkpoint, whether it is quantized), read from its config.json."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(base)
    quantized = getattr(cfg, "quantization_config", None) is not None
    dt = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None)
    name = str(dt).replace("torch.", "") if dt is not None else "float16"
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(name, "fp16"), quantized


def trained_dtype(source: Path) -> str | None:
    """The dtype the run that made ``source`` trained in: ``run_info.json`` (what the loader chose),
    else ``config.yaml``'s ``model.dtype`` when it names one; None for an adapter from elsewhere."""
    import yaml

    run = run_dir_of(source)
    try:
        dt = json.loads((run / "run_info.json").read_text())["backend"]["dtype"]
    except (OSError, ValueError, KeyError, TypeError):
        dt = None
    if dt is None and (run / "config.yaml").is_file():
        try:
            dt = ((yaml.safe_load((run / "config.yaml").read_text()) or {}).get("model") or {}).get("dtype")
        except (OSError, yaml.YAMLError, AttributeError):
            dt = None
    return dt if dt in ("bf16", "fp16", "fp32") else None


def choose_backend(requested: str) -> str:
    """'unsloth' or 'peft'. ``auto``: Unsloth when it is installed and a CUDA GPU is visible."""
    if requested not in EXPORT_BACKENDS:
        raise ExportError(f"--backend {requested}: choose auto, unsloth or peft")
    have = importlib.util.find_spec("unsloth") is not None
    if is_unsloth(requested) and not have:
        raise ExportError("--backend unsloth but unsloth is not installed: pip install 'unsloth-grpo[unsloth]', "
                          "or use --backend peft")
    if requested != "auto":
        return requested
    if not have:
        return "peft"
    import torch

    return "unsloth" if torch.cuda.is_available() else "peft"


def hub_token() -> str | None:
    for name in TOKEN_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    return None


# ---------------------------------------------------------------- the export itself


def merge_dtype(requested: str, source: Path, base_dtype: str) -> tuple[str, str]:
    """(dtype of the merged weights, why) for ``--dtype``. ``auto``: the dtype the run trained in,
    so an fp32 run stays fp32 and the merge computes what training computed; for an adapter without
    a run record, the base checkpoint's dtype."""
    if requested != "auto":
        return requested, "--dtype"
    trained = trained_dtype(source)
    if trained is not None:
        return trained, "the dtype the run trained in"
    return base_dtype, "the base model's dtype"


def _merge_peft(adapter: Path | None, source: Path, base: str | None, out: Path, dtype: str, log,
                shown: Path | str | None = None) -> tuple[str, str]:
    import torch

    from unsloth_grpo.hardware.backend import Decision, load

    weights_from = base if adapter is not None else str(source)
    base_dt, quantized = _base_dtype(weights_from)
    if quantized:
        raise ExportError(f"the base model '{weights_from}' is quantized (4/8-bit); merging into it would lose "
                          "precision. Use --backend unsloth (pip install 'unsloth-grpo[unsloth]'), which merges "
                          "into 16-bit weights, or pass --base-model with the 16-bit version of the same model")
    dt, why = merge_dtype(dtype, source, base_dt)
    loaded = load(weights_from, Decision.saved_model("transformers", "cpu", dt), adapter=adapter, purpose="merge")
    model = loaded.model.merge_and_unload() if adapter is not None else loaded.model
    with torch.no_grad():
        model.save_pretrained(str(out), safe_serialization=True)
    loaded.tokenizer.save_pretrained(str(out))
    log(f"merged ({dt}, {why}) -> {shown or out}")
    return dt, why


def _load_as_trained(source: Path):
    """Load the adapter as it was trained: a 4-bit base stays 4-bit on the GPU (a 7-8B model in
    16-bit does not fit a 16 GB card) and ``save_pretrained_merged`` writes 16-bit weights from it.
    The dtype is Unsloth's choice for the card ("auto")."""
    from unsloth_grpo.hardware.backend import Decision, load, trained_in_4bit

    four = trained_in_4bit(source, as_loaded=False)
    loaded = load(str(source), Decision.saved_model("unsloth", "cuda", "auto", four), purpose="merge")
    return loaded.model, loaded.tokenizer


def unsloth_merge_base(source: Path, base: str | None, *, env=None,
                       hub_probe: Callable[[str, int, float], tuple[bool, str]] | None = None) -> str | None:
    """The 16-bit weights Unsloth's 16-bit merge of a 4-bit run downloads; raises when they cannot be had.

    ``save_pretrained_merged(save_method="merged_16bit")`` does not merge into the 4-bit model: it
    fetches the base's 16-bit repository shard by shard (unsloth_zoo ``merge_and_overwrite_lora``)
    and merges the adapter onto those weights. Offline and without them in the cache it raises. A
    run trained in 16-bit returns None (its base is what it loads).
    """
    from unsloth_grpo.hardware.backend import trained_in_4bit
    from unsloth_grpo.hardware.doctor import probes
    from unsloth_grpo.models.ref import model_ref

    if not (trained_in_4bit(source, as_loaded=False) or (base and model_ref(base).prequantized)):
        return None
    name = model_ref(base).full_precision if base else None
    if not name or Path(name).expanduser().is_dir():
        return name
    env = dict(os.environ if env is None else env)
    cache = probes.hf_cache_dir(env)
    from huggingface_hub import try_to_load_from_cache

    for weights in ("model.safetensors.index.json", "model.safetensors"):
        try:
            if isinstance(try_to_load_from_cache(name, weights, cache_dir=cache), str):
                return name
        except ValueError:
            break
    offline = any(probes.truthy(env.get(k)) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    host, port = probes.hub_address(env)
    ok, why = (False, "offline mode is on") if offline else (hub_probe or probes.tcp_probe)(host, port, 3.0)
    if ok:
        return name
    raise ExportError(
        f"the 16-bit export of this 4-bit run merges the adapter onto the 16-bit weights of {name}, which Unsloth "
        f"downloads (it does not merge into the 4-bit weights); they are not in the cache ({cache}) and the hub "
        f"cannot be reached ({why}). Run once with network, or merge onto a local 16-bit copy: "
        f"--backend peft --base-model PATH")


class _Staging:
    """Every folder the export writes is made beside its target under a hidden name and moved into
    place only when the whole export has succeeded. On failure (or Ctrl-C) :meth:`discard` removes all
    of them, so nothing half-made is left, and a target that already existed (``--force``) is kept
    as it was."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []  # (staging folder, target)
        self._scratch: list[Path] = []
        self._made: list[Path] = []  # parent folders that did not exist before

    def _make(self, folder: Path) -> Path:
        missing = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]
        self._made += [p for p in missing if p not in self._made]
        _remove(folder)
        folder.mkdir(parents=True)
        return folder

    def folder_for(self, target: Path) -> Path:
        stage = self._make(target.parent / f".{target.name}.partial-{os.getpid()}")
        self._pending.append((stage, target))
        return stage

    def scratch_beside(self, target: Path, what: str) -> Path:
        """A folder that is removed whatever happens (the merged weights a GGUF-only export needs)."""
        scratch = self._make(target.parent / f".{target.name}.{what}-{os.getpid()}")
        self._scratch.append(scratch)
        return scratch

    def commit(self) -> None:
        for stage, target in self._pending:
            old = target.parent / f".{target.name}.replaced-{os.getpid()}"
            if target.exists():
                target.rename(old)  # --force, or an empty folder: out of the way first, removed below
            stage.rename(target)
            _remove(old)
        self._pending.clear()
        self._made.clear()  # they hold the export now
        self.discard()

    def discard(self) -> None:
        for stage, _target in self._pending:
            _remove(stage)
        self._pending.clear()
        for scratch in self._scratch:
            _remove(scratch)
        self._scratch.clear()
        for folder in sorted(self._made, key=lambda p: len(p.parts), reverse=True):  # deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
        self._made.clear()


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def check_target(out: Path, flag: str, source: Path, force: bool) -> None:
    """A target folder the export may write: new, empty, or (with ``force``) one it replaces at the end;
    never a run, a folder inside one or one that holds one (:func:`unsloth_grpo.runs.output_problem`),
    nor the folder it exports from or one above it."""
    from unsloth_grpo.runs import output_problem

    if out.resolve() == source.resolve():
        raise ExportError(f"{flag} {out} is the run/adapter directory itself; choose a new directory")
    problem = output_problem(out, flag, force=force)
    if problem is not None:
        raise ExportError(problem)
    if out.resolve() in source.resolve().parents:  # an adapter that is no run, in the folder to replace
        raise ExportError(f"{flag} {out} holds the model being exported ({source}); choose a new directory")
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise ExportError(f"{flag} {out}: {parent} is not writable; choose a folder you can write")


def _gguf_preflight(source: Path, adapter: Path | None, base: str | None, quant: str):
    """The GGUF checks that need no weights (type, quantizer, family, tokenizer), before any merge."""
    from unsloth_grpo.export.gguf_writer import GGUFError, check_quant, preflight, require_quantizer

    weights_from = Path(base) if adapter is not None and base else source
    tok_dir = source if (source / "tokenizer_config.json").is_file() else weights_from
    try:
        if not (weights_from / "config.json").is_file():  # a hub base (a 4-bit run's 16-bit twin): checked after the merge
            q = check_quant(quant)
            return q, require_quantizer(q)
        return preflight(weights_from, tok_dir, quant)
    except GGUFError as exc:
        raise ExportError(f"GGUF: {exc}") from None


def export_model(model: str | os.PathLike, merged_dir: str | os.PathLike | None = None, *,
                 gguf_dir: str | os.PathLike | None = None, quant: str = "q8_0",
                 push_to_hub: str | None = None, private: bool = True, backend: str = "auto",
                 base_model: str | None = None, dtype: str = "auto", force: bool = False, verify: bool = False,
                 log: Callable[[str], None] = print) -> ExportResult:
    """Merge ``model`` (run, checkpoint or adapter) into ``merged_dir``; optionally GGUF and a hub push.

    Every check that needs no model (paths, token, backend, GGUF type, quantizer, family, tokenizer)
    runs first. Nothing is left half-made: the folders are written under hidden names beside their
    targets and moved into place only at the end, so a failure leaves no trace and an existing
    target (replaced only with ``force``) stays as it was. With ``verify`` and ``gguf_dir`` the GGUF
    file is loaded back and compared with the merged weights (``result.gguf_check``).
    Raises :class:`ExportError` with the fix when something is missing.
    """
    if merged_dir is None and gguf_dir is None:
        raise ExportError("nothing to do: pass --merged DIR and/or --gguf DIR")
    if push_to_hub and merged_dir is None:
        raise ExportError("--push-to-hub uploads the merged model: pass --merged DIR as well")
    if dtype not in ("auto", "bf16", "fp16", "fp32"):
        raise ExportError(f"--dtype {dtype}: choose auto, bf16, fp16 or fp32")
    token = hub_token()
    if push_to_hub and not token:
        raise ExportError("--push-to-hub needs a token in the environment: export HF_TOKEN=hf_... "
                          "(a write token from https://huggingface.co/settings/tokens); it is never written to disk")
    source, adapter = resolve_source(model)
    merged_target = Path(merged_dir) if merged_dir else None
    gguf_target = Path(gguf_dir) if gguf_dir else None
    if merged_target and gguf_target and merged_target.resolve() == gguf_target.resolve():
        raise ExportError(f"--merged and --gguf are the same folder ({merged_target}); give each its own")
    for target, flag in ((merged_target, "--merged"), (gguf_target, "--gguf")):
        if target is not None:
            check_target(target, flag, source, force)
    chosen = choose_backend(backend)
    base = adapter_base(adapter, base_model) if adapter is not None else None
    if gguf_target is not None:
        quant, quantizer = _gguf_preflight(source, adapter, base, quant)
    result = ExportResult(source, adapter, base, merged_target, "")

    staging = _Staging()
    try:
        out = staging.folder_for(merged_target) if merged_target else staging.scratch_beside(gguf_target, "merging")
        if is_unsloth(chosen):
            _merge_unsloth(source, base, out, result, log)
        else:
            result.dtype, result.dtype_reason = _merge_peft(adapter, source, base, out, dtype, log,
                                                            shown=merged_target or "a temporary folder for the GGUF")
            result.method = "peft merge_and_unload" if adapter is not None else "re-saved (no adapter to merge)"
        carry_kept_vocab(out, (source, adapter, base))  # a merge re-saves the tokenizer, not its scores
        if gguf_target is not None:
            _write_gguf(out, staging.folder_for(gguf_target), gguf_target, quant, quantizer, verify, result, log)
        if merged_target is not None:
            _write_export_bundle(result, quant, out)
            write_model_card(out, run_dir=run_dir_of(source), base_model=result.base_model, merged=True,
                             gguf_files=result.gguf_files)
        staging.commit()
    except BaseException:
        staging.discard()
        raise
    if push_to_hub:
        result.pushed_to = push_folder(result.merged_dir, push_to_hub, token=token, private=private,
                                       extra_files=result.gguf_files, log=log)
    return result


def _merge_unsloth(source: Path, base: str | None, out: Path, result: ExportResult, log) -> None:
    onto = unsloth_merge_base(source, base)  # before loading: offline, a missing base stops here
    unsloth_model, tokenizer = _load_as_trained(source)
    if onto:
        log(f"merging the adapter onto the 16-bit weights of {onto} (Unsloth downloads them)")
    try:
        unsloth_model.save_pretrained_merged(str(out), tokenizer, save_method="merged_16bit")
    except Exception as exc:  # noqa: BLE001 - Unsloth raises RuntimeError for a base it cannot fetch
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ExportError(f"Unsloth's 16-bit merge failed: {type(exc).__name__}: {first}"
                          + (f" (it merges onto {onto}; with network, or with a local 16-bit copy and "
                             "--backend peft --base-model PATH, the export works)" if onto else "")) from exc
    result.method = "unsloth save_pretrained_merged(merged_16bit)" + (f" onto {onto}" if onto else "")
    result.dtype, result.dtype_reason = saved_dtype(out), "Unsloth merges into 16-bit weights"
    log(f"merged ({result.dtype or '16-bit'}, Unsloth) -> {result.merged_dir or 'a temporary folder for the GGUF'}")


def _write_gguf(merged: Path, stage: Path, target: Path, quant: str, quantizer, verify: bool, result: ExportResult,
                log) -> None:
    """The GGUF file and its Modelfile into ``stage`` (moved to ``target`` at the end), checked when asked."""
    from unsloth_grpo.export.gguf_check import verify_gguf
    from unsloth_grpo.export.gguf_ollama import write_modelfile
    from unsloth_grpo.export.gguf_writer import GGUFError, write_gguf

    name = f"model-{quant}.gguf"
    try:
        info = write_gguf(merged, stage / name, quant, name=run_dir_of(result.source).name, quantizer=quantizer,
                          log=lambda m: log(m.replace(str(stage), str(target))))
        write_modelfile(stage / name, merged)
    except GGUFError as exc:
        raise ExportError(f"GGUF: {exc}") from None
    result.gguf_dir, result.gguf_info = target, info
    result.gguf_files = [target / name]
    result.notes += [f"gguf: {n}" for n in info.notes]
    if verify:
        try:
            result.gguf_check = verify_gguf(merged, stage / name, quant)
        except Exception as exc:  # noqa: BLE001 - a file that cannot be read back is a failed check, not a crash
            first = (str(exc).strip().splitlines() or [""])[0]
            result.gguf_check_error = f"{type(exc).__name__}: {first}"


def _write_export_bundle(result: ExportResult, quant: str, where: Path) -> None:
    from unsloth_grpo.runs import collect_bundle, read_bundle, write_bundle

    run_bundle = read_bundle(result.source) or {}
    bundle = collect_bundle()  # versions, git commit and command of the export itself
    export_info = {
        "source": str(result.source), "adapter": str(result.adapter) if result.adapter else None,
        "base_model": result.base_model, "method": result.method,
        "gguf": {"dir": str(result.gguf_dir), "quant": quant, "files": [str(f) for f in result.gguf_files]}
        if result.gguf_dir else None,
        "notes": result.notes,
    }
    # The run's own bundle (config, seed, rewards, dataset) is kept whole; the export adds to it.
    merged = {**run_bundle, "export": {**export_info, "created": bundle["created"], "command": bundle["command"],
                                       "packages": bundle["packages"], "git": bundle["git"]}}
    if not run_bundle:
        merged.update({k: bundle[k] for k in ("packages", "git", "python", "platform")})
        merged["note"] = "the source carried no reproducibility.json (not a run of this toolkit?)"
    write_bundle(where, merged)


def push_folder(folder: Path, repo: str, *, token: str, private: bool = True, extra_files: list[Path] = (),
                log: Callable[[str], None] = print) -> str:
    """Upload ``folder`` (and GGUF files) to the hub repo ``repo``; the token stays in memory."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo, private=private, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=str(folder), commit_message="unsloth-grpo export")
    for f in extra_files:
        api.upload_file(repo_id=repo, path_or_fileobj=str(f), path_in_repo=f.name)
    url = f"https://huggingface.co/{repo}"
    log(f"pushed -> {url}")
    return url


def compare_logits(model_a, model_b, tokenizer, texts: list[str], *, scale: bool = False):
    """Largest absolute difference between two models' logits on ``texts`` (a merge check);
    with ``scale``, (that difference, the largest absolute logit of ``model_a``)."""
    import torch

    worst = largest = 0.0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
            a = model_a(**ids).logits.float()
            b = model_b(**ids).logits.float()
            worst = max(worst, (a - b).abs().max().item())
            largest = max(largest, a.abs().max().item())
    return (worst, largest) if scale else worst


#: ``--verify``'s tolerance for each dtype of the merged weights, as a share of the adapter model's
#: largest absolute logit. Merging in that dtype rounds every weight, so the logits move by an amount
#: that grows with the logits and with the dtype's precision. Measured with ``export --verify``
#: (docs/export.md): a correct merge into SmolLM2-135M-Instruct differs by 2.9e-6 (fp32), 6.0e-4
#: (fp16) and 4.0e-3 (bf16) of its largest logit; the smoke run's tiny model by 4.3e-6, 1.9e-3 and
#: 0.12 (bf16 cannot hold its large weights: its outputs change, and --verify says so). A merge into
#: the wrong weights moves them by about the whole logit scale.
VERIFY_TOLERANCE = {"fp32": 2e-5, "fp16": 2e-2, "bf16": 5e-2}


@dataclass
class Verification:
    """The merged model against the adapter model it came from, on the same text."""

    dtype: str  # of the merged weights
    max_abs_diff: float
    max_abs_logit: float

    @property
    def tolerance(self) -> float:
        return VERIFY_TOLERANCE[self.dtype] * max(self.max_abs_logit, 1.0)

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def summary(self) -> str:
        share = self.max_abs_diff / max(self.max_abs_logit, 1e-12)
        head = (f"merged ({self.dtype}) vs adapter logits: max abs diff {self.max_abs_diff:.2e} "
                f"({share:.1e} of the largest logit, {self.max_abs_logit:.1f}); {self.dtype} tolerance "
                f"{self.tolerance:.2e} ({VERIFY_TOLERANCE[self.dtype]:g} of it)")
        if self.ok:
            return f"{head}: ok"
        return (f"{head}: EXCEEDED. The merged weights do not compute what the trained adapter computes"
                + (f"; {self.dtype} rounds them too coarsely for this model: export with --dtype fp32"
                   if self.dtype != "fp32" else "; the merge is wrong (check --base-model is the weights the "
                   "run trained on)"))


def saved_dtype(model_dir: Path) -> str | None:
    """The dtype a saved model's config.json records, as fp32 / bf16 / fp16."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    name = str(cfg.get("dtype") or cfg.get("torch_dtype") or "").replace("torch.", "")
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(name)


def probe_text(tokenizer, question: str = "What is 15 + 27?") -> str:
    """A short prompt in the model's own format: its chat template's user turn, opened for the answer, or a
    plain ``Question: ... Answer:`` completion when it has no template (a base model such as Gemma 3 270M)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                             add_generation_prompt=True)
    return f"Question: {question}\nAnswer:"


def verify_merge(result: ExportResult, texts: list[str] | None = None) -> Verification:
    """Reload the merged directory with plain transformers and compare it with the adapter model,
    both computed in fp32, against the tolerance of the merged weights' dtype."""
    from transformers import AutoModelForCausalLM

    from unsloth_grpo.hardware.backend import load_for_inference

    if result.merged_dir is None:
        raise ExportError("no merged directory to verify")
    dtype = saved_dtype(result.merged_dir) or result.dtype
    if dtype not in VERIFY_TOLERANCE:
        raise ExportError(f"{result.merged_dir}/config.json records no dtype --verify knows "
                          f"({', '.join(VERIFY_TOLERANCE)})")
    ref = load_for_inference(str(result.source), backend="transformers", device="cpu", dtype="fp32",
                             log=lambda _m: None)
    texts = texts or [probe_text(ref.tokenizer)]
    merged = AutoModelForCausalLM.from_pretrained(str(result.merged_dir), dtype="float32")
    merged.eval()
    diff, largest = compare_logits(ref.model, merged, ref.tokenizer, texts, scale=True)
    return Verification(dtype, diff, largest)


__all__ = ["VERIFY_TOLERANCE", "ExportError", "ExportResult", "Verification", "check_target", "compare_logits",
           "export_model", "hub_token", "merge_dtype", "model_card", "probe_text", "push_folder", "resolve_source",
           "trained_dtype", "verify_merge", "write_model_card"]
