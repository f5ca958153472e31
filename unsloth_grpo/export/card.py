"""The model card of a run's adapter or merged model: base model, task, rewards, steps, scores, plots.

It describes the run's own files (``config.yaml``, ``metrics.jsonl``, ``report.json``, ``plots/``), so
training writes it beside the adapter and the export beside the merged weights.

Example::

    from unsloth_grpo.export.card import write_model_card
    write_model_card("outputs/smoke")          # outputs/smoke/README.md
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from unsloth_grpo.data import looks_like_path


def run_dir_of(source: Path) -> Path:
    """The run directory an adapter or checkpoint belongs to (where config.yaml and metrics are)."""
    for d in (source, *source.parents[:3]):
        if (d / "config.yaml").is_file():
            return d
    return source


def _hub_id(name: str | None) -> str | None:
    """``name`` when it is a hub id (org/name), not a local path, a cache path or builtin:tiny."""
    if not name or name.count("/") != 1 or looks_like_path(name):
        return None
    return name


def model_card(run_dir: str | os.PathLike, *, base_model: str | None = None, merged: bool = False,
               gguf_files: list[Path] = ()) -> str:
    """The README.md of an adapter or merged model: base model, task, rewards, steps, scores, plots.

    Read from the run's own files (``config.yaml``, ``metrics.jsonl``, ``report.json``, ``plots/``);
    whatever a run did not write is left out. The YAML header's ``base_model`` names a hub id only
    (the run's ``model.name``), never the local cache path the weights were read from. A built-in
    real model (``builtin:smollm2-135m-instruct``) is named by its origin, with its license and how
    its weights came here, since whatever is trained from it inherits them.
    """
    import yaml

    run = Path(run_dir)
    cfg = yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else {}
    model = (cfg.get("model") or {}).get("name") or base_model
    hub = _hub_id(model) or _hub_id(base_model)
    task = cfg.get("task", "unknown")
    rewards = cfg.get("rewards") or []
    steps, first, last = 0, None, None
    if (run / "metrics.jsonl").is_file():
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rewards_seen = [r["reward"] for r in rows if "reward" in r]
        steps = max((int(r.get("step", 0)) for r in rows), default=0)
        if rewards_seen:
            first = sum(rewards_seen[:5]) / len(rewards_seen[:5])
            last = sum(rewards_seen[-5:]) / len(rewards_seen[-5:])
    from unsloth_grpo.models.pretrained import REAL_MODELS

    real = REAL_MODELS.get(model or "") or REAL_MODELS.get(base_model or "")
    header = {"library_name": "transformers" if merged else "peft",
              "tags": ["grpo", "trl", "unsloth-grpo", task] + ([] if merged else ["lora"])}
    if real is not None:  # a built-in real model: its weights' license binds what is trained from them
        header["license"] = real.license.lower()
        hub = real.origin
    if hub:
        header["base_model"] = hub
    lines = ["---", yaml.safe_dump(header, sort_keys=False).strip(), "---", "",
             f"# {task} GRPO {'model (LoRA merged)' if merged else 'LoRA adapter'}", "",
             f"Trained with GRPO (TRL's GRPOTrainer, through unsloth-grpo) on the `{task}` task.", "",
             f"- base model: `{model or 'unknown'}`" + ("" if hub else " (not a hub model)"),
             *([f"- base model origin and license: {real.provenance()}"] if real is not None else []),
             *([f"- terms: {real.terms}"] if real is not None and real.terms else []),
             f"- task: `{task}`, data: `{(cfg.get('data') or {}).get('source', 'unknown')}`",
             f"- steps: {steps}" + (f" of {(cfg.get('training') or {}).get('max_steps')}" if cfg.get("training") else ""),
             "- rewards: " + (", ".join(f"`{r.get('name')}` x {r.get('weight', 1.0):g}" for r in rewards) or "none recorded")]
    t = cfg.get("training") or {}
    if t:
        lines.append(f"- loss: `{t.get('loss_type')}`, mask_truncated_completions={t.get('mask_truncated_completions')}, "
                     f"epsilon_high={t.get('epsilon_high')}, {t.get('num_generations')} generations of up to "
                     f"{t.get('max_completion_length')} tokens, learning rate {t.get('learning_rate')}")
    if first is not None:
        lines.append(f"- mean reward: {first:.3f} over the first 5 logged steps, {last:.3f} over the last 5")
    report = run / "report.json"
    if report.is_file():
        data = json.loads(report.read_text())
        lines += ["", f"## Before and after training ({data.get('n', '?')} held-out problems)", "",
                  "| metric | before | after | change |", "|---|---|---|---|"]
        for row in data.get("metrics", []):
            lines.append(f"| {row.get('label', row['metric'])} | {row['baseline']:.3f} | {row['trained']:.3f} | "
                         f"{row['diff']:+.3f} |")
        if data.get("note"):  # what strict and lenient accuracy each measure
            lines += ["", data["note"]]
    plots = sorted((run / "plots").glob("*.png")) if (run / "plots").is_dir() else []
    if plots:
        lines += ["", "## Training curves", ""]
        lines += [f"![{p.stem}](plots/{p.name})" for p in plots]
    if gguf_files:
        lines += ["", "## GGUF", ""] + [f"- `{Path(f).name}`" for f in gguf_files]
    lines += ["", "The resolved config is in `config.yaml` of the run; `reproducibility.json` holds the "
              "versions, seed and data fingerprint.", ""]
    return "\n".join(lines)


def write_model_card(target: str | os.PathLike, *, run_dir: str | os.PathLike | None = None, **kwargs: Any) -> Path:
    """Write :func:`model_card` as ``target/README.md`` (replacing PEFT's empty template); plots are copied along."""
    import shutil

    target, run = Path(target), Path(run_dir or target)
    card = target / "README.md"
    card.write_text(model_card(run, **kwargs))
    if target.resolve() != run.resolve() and (run / "plots").is_dir():
        shutil.copytree(run / "plots", target / "plots", dirs_exist_ok=True)
    return card
