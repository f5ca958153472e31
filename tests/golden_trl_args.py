"""Every recipe's TRL arguments as plain data: the golden file tests/data/golden_trl_args.json holds them.

A restructuring must leave what reaches TRL alone. For each recipe, each of its presets (``auto`` aside:
it follows the machine) and its defaults, this resolves the config as the command line does and
builds the keyword arguments of TRL's ``GRPOConfig`` (and, for a run in stages, each stage's
``GRPOConfig`` or ``SFTConfig``) on three fixed decisions: a CPU run, a GPU run with Unsloth and
vLLM, and a GPU run with transformers and TRL's own vLLM. Nothing is loaded and nothing of the machine is read.

    python tests/golden_trl_args.py --write   # after a change that is meant to change TRL's arguments
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "data" / "golden_trl_args.json"


def _decisions(model_name: str) -> dict:
    from unsloth_grpo.hardware.backend import BackendInfo

    return {
        "cpu": BackendInfo("transformers", "cpu", "fp32", False, False, model_name, "golden"),
        "gpu": BackendInfo("unsloth", "cuda", "bf16", True, True, model_name, "golden", vllm_standby=True),
        "gpu-transformers-vllm": BackendInfo("transformers", "cuda", "fp16", False, True, model_name, "golden"),
    }


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _recorder(cls: type) -> type:
    """TRL's config class ``cls`` (its fields intact) that keeps the keyword arguments it is built with."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    return type(f"Recorded{cls.__name__}", (cls,), {"__init__": __init__})


def _trl_kwargs(build, *args, **kwargs) -> dict:
    """The keyword arguments ``build`` (grpo_args or sft_args) hands TRL's config class."""
    import trl

    saved = trl.GRPOConfig, trl.SFTConfig
    trl.GRPOConfig, trl.SFTConfig = _recorder(saved[0]), _recorder(saved[1])
    try:
        return _plain(build(*args, **kwargs).kwargs)
    finally:
        trl.GRPOConfig, trl.SFTConfig = saved


def _run_args(cfg, info) -> dict:
    from unsloth_grpo.training.trainer_args import grpo_args, sft_args

    def grpo(c):
        return _trl_kwargs(grpo_args, c, info, weights=[r.weight for r in c.rewards]) | {
            "(rewards)": [r.name for r in c.rewards]}

    if not cfg.stages:
        return {"grpo": grpo(cfg)}
    from unsloth_grpo.training.stages import stage_config

    out = {}
    for i, stage in enumerate(cfg.stages, 1):
        scfg = stage_config(cfg, i)
        out[f"{i:02d}-{stage.name}"] = _trl_kwargs(sft_args, scfg, info) if stage.kind == "sft" else grpo(scfg)
    return out


def collect() -> dict:
    import unsloth_grpo.recipes

    out = {}
    for m in sorted(pkgutil.iter_modules(unsloth_grpo.recipes.__path__), key=lambda m: m.name):
        recipe = importlib.import_module(f"unsloth_grpo.recipes.{m.name}").RECIPE
        for preset in [None, *sorted(recipe.presets)]:
            cfg = recipe.resolve(preset=preset)
            for where, info in _decisions(cfg.model.name).items():
                out[f"{m.name}/{preset or 'defaults'}/{where}"] = _run_args(cfg, info)
    return out


if __name__ == "__main__":
    data = collect()
    if "--write" in sys.argv:
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(data)} entries to {GOLDEN}")
    else:
        print(json.dumps(data, indent=1, sort_keys=True))
