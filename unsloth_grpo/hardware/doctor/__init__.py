"""``unsloth-grpo doctor``: what this machine can run, and the exact fix for what it cannot.

Most failures people meet with GRPO stacks are version mixes that break deep inside a library
(TRL, transformers, Unsloth and vLLM each pin the others). The doctor reads the installed
versions from package metadata (nothing heavy is imported for that), compares them with the
ranges this package declares and the ranges Unsloth (and vLLM, when installed) declare, and
turns every mismatch into one ``pip install "pkg>=x,<y"`` that satisfies all of them at once.

One module per job:

- :mod:`.requirements`: the declared ranges and the installed versions, combined into one range
  and one ``pip install``;
- :mod:`.probes`: torch and its GPUs, the driver, the network, the disk (each replaceable);
- :mod:`.report`: :func:`collect_report`, everything the checks need as pure data;
- :mod:`.checks`: :func:`run_checks` and :func:`preflight`, the environment's problems with their fixes;
- :mod:`.recipe`: :func:`recipe_problems` and :func:`preflight_recipe`, what stops a recipe on this
  machine before anything is loaded (no GPU, a missing model, the hub off);
- :mod:`.screen`: :func:`render`, the one screen ``unsloth-grpo doctor`` prints.

Three layers, each usable alone::

    report = collect_report()                 # pure data: versions, GPUs, env, probes
    problems = run_checks(report, backend="unsloth", need_bf16=True)
    preflight("auto", need_bf16=False)        # what a recipe calls first; raises EnvironmentProblem

Every input of :func:`collect_report` can be injected (versions, declared requirements, the
torch/GPU probe, environment variables, network probes, free disk), which is how the tests
simulate a T4, a CPU-only box or a broken version set.

This front names the entry points; the package's own code imports each from its module (patch a
name where it is looked up, in that module).
"""

from unsloth_grpo.hardware.doctor.checks import ERROR, WARNING, EnvironmentProblem, Problem, preflight, run_checks
from unsloth_grpo.hardware.doctor.recipe import RecipeCannotRunHere, preflight_recipe, recipe_problems
from unsloth_grpo.hardware.doctor.report import Report, collect_report
from unsloth_grpo.hardware.doctor.screen import render

__all__ = ["ERROR", "WARNING", "EnvironmentProblem", "Problem", "RecipeCannotRunHere", "Report", "collect_report",
           "preflight", "preflight_recipe", "recipe_problems", "render", "run_checks"]
