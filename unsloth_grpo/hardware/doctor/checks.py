"""The problem checks: each problem of a :class:`~.report.Report` for a run, with its fix.

:func:`run_checks` returns every :class:`Problem`, errors (the run would fail) before warnings;
:func:`preflight` is what a recipe calls first, raising :class:`EnvironmentProblem` on the
blocking ones. Version mismatches become one ``pip install`` that satisfies every declared range.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from unsloth_grpo.config import BACKENDS, FAST_INFERENCE, is_unsloth  # the choices' names, defined once
from unsloth_grpo.hardware.doctor.probes import GPU
from unsloth_grpo.hardware.doctor.report import Report, collect_report, gib
from unsloth_grpo.hardware.doctor.requirements import PACKAGE, Declared, combine_specifiers, pip_command
from unsloth_grpo.hardware.profiles import vllm_version_problem

logger = logging.getLogger(__name__)

#: Packages Unsloth declares on Linux x86-64 that importing it and training never need: missing or
#: outside Unsloth's range, they are a warning, not a blocking problem (tests/test_gpu_path.py
#: imports unsloth with the first two hidden, and pydantic, which this project needs itself).
NOT_NEEDED_TO_TRAIN = {
    "xformers": "optional attention kernels: without them Unsloth uses PyTorch attention",
    "diffusers": "only Unsloth's image-generation paths import it",
    "certifi": "no module of unsloth or unsloth_zoo imports it (requests uses it for HTTPS)",
}


ERROR = "error"  # blocks: the run would fail
WARNING = "warning"  # informs: the run can go on

#: Below this much free space in the output or cache folder the doctor warns (a merged 7B
#: export alone is ~15 GB in 16-bit).
LOW_DISK_BYTES = 10 * 2**30

#: Unsloth supports compute capability 7.0 and newer; older cards run, slowly.
UNSLOTH_MIN_CAPABILITY = (7, 0)


@dataclass(frozen=True)
class KnownIssue:
    """A version that installs cleanly but fails at run time under a condition."""

    package: str
    versions: str  # specifier the bad versions match
    when: str  # "no_cuda": only without a CUDA GPU
    explanation: str
    exclude: str  # added to the fix's range


KNOWN_ISSUES = (
    KnownIssue(
        package="trl",
        versions="==1.15.0",
        when="no_cuda",
        explanation=(
            "trl 1.15.0's GRPOTrainer calls a Triton kernel unconditionally and fails without a CUDA GPU "
            "(\"'NoneType' object has no attribute 'apply'\" or 'RuntimeError: 0 active drivers')"
        ),
        exclude="!=1.15.0",
    ),
)


@dataclass(frozen=True)
class Problem:
    severity: str  # ERROR or WARNING
    topic: str  # "versions", "python", "backend", "gpu", "vllm", "hub", "disk"
    message: str
    fix: str | None = None
    package: str | None = None  # set for version problems

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        return f"{self.message}\n    fix: {self.fix}" if self.fix else self.message


class EnvironmentProblem(RuntimeError):
    """The environment cannot run the requested recipe. ``problems`` holds the blocking ones."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"this environment cannot run the recipe:\n{lines}\n"
            "Run `unsloth-grpo doctor` for the full report."
        )


def _contains(spec: str, version: str) -> bool:
    return SpecifierSet(spec).contains(Version(version), prereleases=True)


def resolve_backend(report: Report, backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {', '.join(BACKENDS)}")
    return report.auto_backend if backend == "auto" else backend


def run_checks(
    report: Report,
    *,
    backend: str = "auto",
    need_bf16: bool | None = None,
    fast_inference: str = "auto",
    load_in_4bit: bool = True,
) -> list[Problem]:
    """Every problem with this environment for a run on ``backend``, errors first.

    ``need_bf16=True`` makes a GPU without bf16 blocking; ``fast_inference='on'`` makes a
    missing vLLM (or one that cannot load the run's 4-bit weights) blocking. Unsloth's (or
    vLLM's) own version ranges block only when the run uses them; otherwise a mismatch there
    is a warning.
    """
    if fast_inference not in FAST_INFERENCE:
        raise ValueError(f"fast_inference={fast_inference!r} is not one of {', '.join(FAST_INFERENCE)}")
    effective = resolve_backend(report, backend)
    problems: list[Problem] = []
    problems += _python_problems(report)
    problems += _version_problems(report, effective, fast_inference)
    problems += _backend_problems(report, backend, effective)
    problems += _gpu_problems(report, effective, need_bf16)
    problems += _vllm_problems(report, fast_inference, load_in_4bit)
    problems += _network_problems(report)
    problems += _disk_problems(report)
    return sorted(problems, key=lambda p: p.severity != ERROR)


def _python_problems(report: Report) -> list[Problem]:
    spec = report.requires_python
    if not spec or _contains(spec, report.python_version):
        return []
    return [
        Problem(
            ERROR,
            "python",
            f"Python {report.python_version} is outside what {PACKAGE} requires ({spec})",
            f"create the environment with a Python that fits {spec}, e.g. `uv venv -p 3.11`",
        )
    ]


#: The packages a requirement may come from that only the Unsloth backend uses.
UNSLOTH_PACKAGES = ("unsloth", "unsloth_zoo")


def _source_is_used(source: str, backend: str, fast_inference: str) -> bool:
    if source in UNSLOTH_PACKAGES:
        return is_unsloth(backend)
    if source == "vllm":
        return fast_inference == "on"
    return True


def _version_problems(report: Report, backend: str, fast_inference: str) -> list[Problem]:
    by_name: dict[str, list[Declared]] = {}
    for d in report.declared:
        by_name.setdefault(d.name, []).append(d)
    no_cuda = not report.torch.cuda_available
    out = []
    for name in list(dict.fromkeys(list(by_name) + [i.package for i in KNOWN_ISSUES])):
        installed = report.version(name)
        # Optional ranges (our extras) only apply to what is installed.
        applicable = [d for d in by_name.get(name, []) if installed is not None or not d.optional]
        spare = NOT_NEEDED_TO_TRAIN.get(name) if all(d.source != PACKAGE for d in applicable) else None
        if installed is None:
            required_by = [d for d in applicable if not d.optional]
            if not required_by:
                continue
            blocking = any(_source_is_used(d.source, backend, fast_inference) for d in required_by) and not spare
            spec = combine_specifiers(d.specifier for d in required_by)
            out.append(
                Problem(
                    ERROR if blocking else WARNING,
                    "versions",
                    f"{name} is not installed; required by " + ", ".join(_who(d) for d in required_by)
                    + (f" (not needed to train: {spare})" if spare else ""),
                    pip_command(name, spec or ""),
                    package=name,
                )
            )
            continue
        try:
            Version(installed)
        except InvalidVersion:
            msg = f"{name} {installed}: cannot read this version, not checked"
            out.append(Problem(WARNING, "versions", msg, package=name))
            continue
        reasons, severities, extra_specs = [], [], []
        for d in applicable:
            if d.specifier and not _contains(d.specifier, installed):
                reasons.append(f"outside the range {_who(d)} ({d.specifier})")
                if d.optional:
                    severities.append(WARNING)
                else:
                    severities.append(ERROR if _source_is_used(d.source, backend, fast_inference) else WARNING)
        for issue in KNOWN_ISSUES:
            if issue.package == name and _contains(issue.versions, installed) and (issue.when != "no_cuda" or no_cuda):
                reasons.append(issue.explanation)
                severities.append(ERROR)
                extra_specs.append(issue.exclude)
        if not reasons:
            continue
        if spare:
            severities = [WARNING for _ in severities]
            reasons.append(f"not needed to train: {spare}")
        spec = combine_specifiers([d.specifier for d in applicable] + extra_specs)
        if spec is None:
            fix = (
                f"no {name} version satisfies every declared range ("
                + "; ".join(f"{d.source}: {d.specifier}" for d in applicable)
                + f"); upgrade or downgrade the package that declares the outlier, then `pip install {name}`"
            )
        else:
            fix = pip_command(name, spec)
        out.append(
            Problem(
                ERROR if ERROR in severities else WARNING,
                "versions",
                f"{name} {installed} is " + "; ".join(reasons),
                fix,
                package=name,
            )
        )
    return out


def _who(d: Declared) -> str:
    if d.optional:
        return f"{d.source}[{','.join(d.extras)}]"
    return d.source


def _extra_install(report: Report, extra: str, fallback: Sequence[str]) -> str:
    """The pip command that installs one of our extras, with the exact pins we declare."""
    reqs = [d for d in report.declared if d.source == PACKAGE and extra in d.extras]
    if not reqs:
        return "pip install " + " ".join(fallback)
    return "pip install " + " ".join(f'"{d.name}{d.specifier}"' for d in reqs)


def _backend_problems(report: Report, requested: str, effective: str) -> list[Problem]:
    out = []
    if not is_unsloth(effective):
        return out
    if not report.unsloth_importable:
        out.append(
            Problem(
                ERROR,
                "backend",
                "backend 'unsloth' was requested but unsloth is not installed",
                _extra_install(report, "unsloth", ["unsloth", "unsloth_zoo"]) + " (or set model.backend=auto)",
            )
        )
    if report.world_size > 1 and is_unsloth(requested):
        out.append(
            Problem(
                ERROR,
                "backend",
                f"backend 'unsloth' under {report.world_size} processes: Unsloth's fast path is single-GPU",
                "set model.backend=transformers (or auto) for multi-process runs",
            )
        )
    if not report.torch.cuda_available:
        out.append(
            Problem(
                WARNING,
                "backend",
                "backend 'unsloth' without a CUDA GPU runs on Unsloth's CPU fallback: slow, no 4-bit, no vLLM",
                None,
            )
        )
    for gpu in _gpus_in_use(report):
        if tuple(gpu.compute_capability) < UNSLOTH_MIN_CAPABILITY:
            out.append(
                Problem(
                    WARNING,
                    "backend",
                    f"{gpu.describe()} is below the compute capability 7.0 Unsloth supports; expect it to be slow",
                    None,
                )
            )
    return out


def _gpus_in_use(report: Report) -> tuple[GPU, ...]:
    """One process uses the first visible GPU; several processes use them all."""
    gpus = report.torch.gpus
    return gpus if report.world_size > 1 else gpus[:1]


def _gpu_problems(report: Report, backend: str, need_bf16: bool | None) -> list[Problem]:
    t = report.torch
    out = []
    if t.version is None:
        if report.version("torch") is None:
            return out  # the version checks report torch as missing
        return [
            Problem(
                ERROR,
                "gpu",
                f"torch {report.version('torch')} is installed but cannot be imported: {t.error}",
                "reinstall it: pip install --force-reinstall torch (keep the version the ranges above allow)",
            )
        ]
    if t.error:
        fix = "check the driver with `nvidia-smi`"
        out.append(Problem(WARNING, "gpu", f"torch could not query CUDA: {t.error}", fix))
    if not t.cuda_available:
        if t.cuda_build and t.nvidia_driver is False:  # a machine without a GPU: nothing to repair
            msg = f"torch {t.version} is a CUDA {t.cuda_build} build on a machine with no NVIDIA GPU"
            fix = ("fine for the smoke presets and for --preset smollm2 (a real 135M model, minutes per run); "
                   "a larger model needs a machine with a CUDA GPU")
        elif t.cuda_build:
            from unsloth_grpo.hardware.profiles import driver_problem

            too_old = driver_problem(t.version, t.cuda_build, t.driver_version)
            msg = too_old or f"torch {t.version} is a CUDA {t.cuda_build} build but no GPU is visible"
            fix = ("update the NVIDIA driver, or install a torch built for an older CUDA" if too_old else
                   "check the driver with `nvidia-smi` and that CUDA_VISIBLE_DEVICES is not empty")
        else:
            msg = f"torch {t.version} is a CPU-only build"
            fix = "install a CUDA build of torch (see https://pytorch.org/get-started/locally/) to use a GPU"
        out.append(Problem(WARNING, "gpu", msg + ": training runs on CPU, practical only for small models", fix))
        if need_bf16:
            out.append(
                Problem(
                    WARNING,
                    "gpu",
                    "bf16 was requested on a CPU run: slow or unsupported on many CPUs",
                    "set model.dtype=fp32 (or auto) on CPU",
                )
            )
        return out
    no_bf16 = [g for g in _gpus_in_use(report) if not g.bf16]
    if no_bf16:
        names = ", ".join(g.describe() for g in no_bf16)
        if need_bf16:
            out.append(
                Problem(
                    ERROR,
                    "gpu",
                    f"bf16 was requested but {names} has no bf16 (needs 8.0+)",
                    "set model.dtype=fp16 (or auto)",
                )
            )
        else:
            out.append(Problem(WARNING, "gpu", f"{names} has no bf16: dtype auto trains in fp16", None))
    return out


def _vllm_problems(report: Report, fast_inference: str, load_in_4bit: bool = True) -> list[Problem]:
    out = []
    installed = report.version("vllm")
    if installed is not None and fast_inference != "off":
        problem = vllm_version_problem(installed, load_in_4bit=load_in_4bit,
                                       bnb_plugin=report.version("vllm-bnb-plugin") is not None,
                                       bnb_version=report.version("bitsandbytes"))
        if problem and report.vllm_usable:  # the TRL range itself already made it unusable
            severity = ERROR if fast_inference == "on" else WARNING
            what = "fast_inference is 'on'" if fast_inference == "on" else "fast_inference auto generates without vLLM"
            out.append(Problem(severity, "vllm", f"{problem}: {what}",
                               'pip install "unsloth-grpo[vllm]" (it pins the vLLM versions that load 4-bit)'))
    if fast_inference == "on" and not report.vllm_usable:
        out.append(
            Problem(
                ERROR,
                "vllm",
                f"fast_inference is 'on' but vLLM cannot be used: {report.vllm_reason}",
                "set model.fast_inference=auto (or off)"
                + ("" if report.vllm_importable else ', or pip install "unsloth-grpo[vllm]" on a CUDA machine'),
            )
        )
    server = report.vllm_server
    if server is not None and not server.ok:
        host, _, port = server.target.rpartition(":")
        out.append(
            Problem(
                ERROR,
                "vllm",
                f"no vLLM server answers at {server.target}: {server.detail}",
                f"start one: on a CPU (vLLM's CPU build) `unsloth-grpo serve MODEL --host {host} --port {port} "
                "--start`; on a GPU the trainer does not use: "
                f"CUDA_VISIBLE_DEVICES=1 trl vllm-serve --model MODEL --host {host} --port {port}",
            )
        )
    return out


def _network_problems(report: Report) -> list[Problem]:
    if report.hub.ok is False:
        return [
            Problem(
                WARNING,
                "hub",
                f"the model hub {report.hub.target} is {report.hub.detail}: only local or cached models will load",
                "use a local model directory (or builtin:tiny), and set HF_HUB_OFFLINE=1 to stop retries",
            )
        ]
    return []


def _disk_problems(report: Report) -> list[Problem]:
    out = []
    for d in report.disks:
        if d.free_bytes is not None and d.free_bytes < LOW_DISK_BYTES:
            out.append(
                Problem(
                    WARNING,
                    "disk",
                    f"only {gib(d.free_bytes)} free in the {d.label} folder {d.path}",
                    "free space or point the folder elsewhere (output_dir, HF_HOME)",
                )
            )
    return out


#: The warnings :func:`preflight` has logged in this process: a notebook's second ``train()`` (the
#: same CPU fallback, the same CUDA build of torch on a machine without a GPU) does not repeat them.
_WARNED: set[str] = set()


def preflight(
    backend: str,
    *,
    need_bf16: bool | None = None,
    fast_inference: str = "auto",
    output_dir: str = ".",
    vllm_server: tuple[str, int] | None = None,
    report: Report | None = None,
    load_in_4bit: bool = True,
) -> None:
    """The check a recipe runs first: raise :class:`EnvironmentProblem` on blocking problems.

    Warnings are logged, each once per process. The hub is not probed (a recipe finds out soon enough), so this takes
    no longer than importing torch and reading package metadata.
    """
    if report is None:
        report = collect_report(output_dir=output_dir, check_hub=False, vllm_server=vllm_server)
    problems = run_checks(report, backend=backend, need_bf16=need_bf16, fast_inference=fast_inference,
                          load_in_4bit=load_in_4bit)
    for p in problems:
        if not p.blocking and str(p) not in _WARNED:
            _WARNED.add(str(p))
            logger.warning("%s", p)
    blocking = [p for p in problems if p.blocking]
    if blocking:
        raise EnvironmentProblem(blocking)
