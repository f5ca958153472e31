"""Multi-stage runs: several trainings in order on one model and one LoRA adapter.

A recipe may list ``stages``; each runs with its own rewards, weights, steps and learning rate
and starts from the adapter the previous stage ended with. A stage is ``kind: grpo`` (TRL's
``GRPOTrainer`` with the stage's rewards) or ``kind: sft`` (TRL's ``SFTTrainer`` on worked
examples written in the answer format: a pre-format stage, so that GRPO starts from a model that
already emits the tags). For example::

    stages:
      - {name: preformat, kind: sft, max_steps: 30, learning_rate: 5.0e-3, num_examples: 200}
      - {name: format, max_steps: 40, rewards: [{name: xml_count, weight: 1.0}, {name: strict_format}]}
      - {name: correctness, max_steps: 60, learning_rate: 1.0e-2,
         rewards: [{name: correctness, weight: 2.0}, {name: xml_count, weight: 0.5}]}

Layout of the run directory::

    RUN/config.yaml, RUN/reproducibility.json     # the whole multi-stage config
    RUN/stages/01-preformat/                       # one train() output per stage: adapter, metrics,
    RUN/stages/02-format/checkpoints/checkpoint-20 #   config, checkpoints, stage_complete.json
    RUN/metrics.jsonl                              # every stage's rows, ``step`` counted across stages
    RUN/stages_summary.json                        # what each stage changed
    RUN/adapter_model.safetensors ...              # the last stage's adapter and tokenizer

``--resume`` continues where the run stopped: finished stages are skipped, the interrupted stage
resumes from its latest checkpoint (or restarts from the previous stage's adapter when it has
none). ``--resume RUN/stages/01-x/checkpoints/checkpoint-N`` goes back to that point and runs
the later stages again.

The run (:func:`unsloth_grpo.training.train.train`) walks the stages itself, training each GRPO stage
with its ``train_grpo`` and each SFT stage with :func:`train_sft`; this module keeps the stages'
bookkeeping (their directories and configs, where a resume starts, the summary, the combined metrics,
the held-out evaluation around them) and imports nothing of the run.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from unsloth_grpo.training import checkpoint as ckpt
from unsloth_grpo.hardware.launch import detect
from unsloth_grpo.config import RecipeConfig, StageConfig, STAGE_KINDS, config_from_dict, config_to_dict
from unsloth_grpo.training.results import ends_compared, ends_words

STAGE_COMPLETE = "stage_complete.json"
SUMMARY_FILE = "stages_summary.json"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: Files that make up a saved adapter with its tokenizer (copied to the run directory at the end).
_ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "chat_template.jinja", "special_tokens_map.json", "vocab.json", "merges.txt",
                  "tokenizer.model", "added_tokens.json")


def stage_dirname(index: int, stage: StageConfig) -> str:
    return f"{index:02d}-{stage.name}"


def stage_dir(cfg: RecipeConfig, index: int) -> Path:
    return Path(cfg.output_dir) / ckpt.STAGES_DIR / stage_dirname(index, cfg.stages[index - 1])


def stage_config(cfg: RecipeConfig, index: int) -> RecipeConfig:
    """The single-stage config of stage ``index`` (1-based): the recipe with the stage's settings."""
    stage = cfg.stages[index - 1]
    d = config_to_dict(cfg)
    d["stages"] = []
    d["output_dir"] = str(stage_dir(cfg, index))
    if stage.rewards:
        d["rewards"] = [dataclasses.asdict(r) for r in stage.rewards]
    d["data"] = {**d["data"], **stage.data}
    d["training"] = {**d["training"], **stage.training, "max_steps": stage.max_steps}
    if stage.learning_rate is not None:
        d["training"]["learning_rate"] = stage.learning_rate
    return config_from_dict(d)


def warmup_categories(cfg: RecipeConfig, index: int) -> list[str] | None:
    """The kinds of problem (``data.categories``) that the SFT stages before stage ``index`` (1-based) kept,
    when each of them kept only some, on purpose; None when no SFT stage comes before it or one trained on
    every kind. The gsm8k smollm2 preset's GRPO stage: ``['addition']`` (its warm-up leaves subtraction to
    GRPO). The trick watcher words its fixes by it (:class:`~unsloth_grpo.training.tricks.TrickWatcher`)."""
    kept: list[str] = []
    sft = [stage_config(cfg, i) for i in range(1, index) if cfg.stages[i - 1].kind == "sft"]
    for scfg in sft:
        if scfg.data.categories is None:
            return None
        kept += [c for c in scfg.data.categories if c not in kept]
    return kept or None


def stage_problems(cfg: RecipeConfig) -> list[str]:
    """Problems of the ``stages`` section, each prefixed with the stage it belongs to."""
    from unsloth_grpo.config import ConfigError, validate

    p: list[str] = []
    seen: set[str] = set()
    recipe_own = set(validate(cfg))  # said once already, at the key the user wrote
    for i, stage in enumerate(cfg.stages, 1):
        where = f"stages[{i - 1}] ({stage.name})"
        if not _SAFE_NAME.match(stage.name or ""):
            p.append(f"{where}: name '{stage.name}' must be letters, digits, '_', '-' or '.' (it names a directory)")
        if stage.name in seen:
            p.append(f"{where}: name '{stage.name}' is used twice; give every stage its own name")
        seen.add(stage.name)
        if stage.kind not in STAGE_KINDS:
            p.append(f"{where}: kind '{stage.kind}' is not one of {', '.join(STAGE_KINDS)}")
            continue
        if stage.max_steps < 1:
            p.append(f"{where}: max_steps={stage.max_steps} must be at least 1")
        if stage.learning_rate is not None and stage.learning_rate <= 0:
            p.append(f"{where}: learning_rate={stage.learning_rate} must be positive")
        if stage.kind == "sft" and stage.rewards:
            p.append(f"{where}: an sft stage trains on examples, not rewards; remove its rewards")
        if stage.kind == "sft" and stage.num_examples < 1:
            p.append(f"{where}: num_examples={stage.num_examples} must be at least 1")
        if "stages" in stage.training or "max_steps" in stage.training or "learning_rate" in stage.training:
            p.append(f"{where}: set max_steps and learning_rate on the stage itself, not under its training")
            continue
        try:
            sub = stage_config(cfg, i)
        except ConfigError as exc:
            p.append(f"{where}: {exc}".replace("unknown config key 'training.", "unknown key 'training."))
            continue
        for q in validate(sub):
            if stage.kind == "sft" and q.startswith("rewards:") or q in recipe_own:
                continue
            if q.startswith(("training.max_steps=", "training.learning_rate=")):
                continue  # the stage's own max_steps and learning_rate (checked above) or the recipe's
            p.append(f"{where}: {q}")
    return p


# ---------------------------------------------------------------- adapters


def stage_digest(stage_cfg: RecipeConfig) -> str:
    """A digest of a stage's whole resolved configuration (:func:`stage_config`), its output folder and the
    run's list of stages aside: equal for two runs whose stage trains the same way, wherever they write and
    whatever their later stages do. What keys a kept warm-up in the benchmarks."""
    import hashlib

    from unsloth_grpo.config import dump_config

    text = dump_config(dataclasses.replace(stage_cfg, output_dir="-", stages=[]))
    return hashlib.sha256(text.encode()).hexdigest()


def lora_state(model) -> dict[str, Any]:
    """A CPU copy of the trainable LoRA tensors of a PEFT model (names as peft saves them)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().float().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_weights(model, adapter_dir: str | Path) -> None:
    """Load a saved adapter's weights into the (same-shaped) LoRA adapter of ``model``."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(adapter_dir) / "adapter_model.safetensors"
    if not path.is_file():
        raise ckpt.CheckpointError(f"{adapter_dir} has no adapter_model.safetensors to start this stage from; "
                                   "the previous stage did not finish: run with --resume to finish it")
    weights = load_file(str(path))
    try:
        result = set_peft_model_state_dict(model, weights)
    except RuntimeError as exc:  # shape mismatch: different r or target modules
        raise ckpt.CheckpointError(f"the adapter in {adapter_dir} does not fit this model's LoRA ({exc}); "
                                   "keep the lora settings the same across stages and resumes") from None
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ckpt.CheckpointError(f"the adapter in {adapter_dir} has weights this model's LoRA lacks "
                                   f"(e.g. {unexpected[0]}); keep lora.target_modules the same")


def change_l2(before: dict, after: dict) -> float:
    total = 0.0
    for k, v in after.items():
        if k in before:
            total += float(((v - before[k]) ** 2).sum())
    return total ** 0.5


def copy_adapter(src: Path, dst: Path) -> None:
    for name in _ADAPTER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


# ---------------------------------------------------------------- SFT pre-format stage


def sft_dataset_for(cfg: RecipeConfig, n: int):
    """``n`` examples as prompt/completion chat pairs, the completion in the task's answer format
    (the task's :meth:`~unsloth_grpo.tasks.Task.sft_examples`)."""
    from unsloth_grpo.tasks import get_task

    return get_task(cfg.task).sft_examples(cfg, n)


def _sft_metrics_callback(path: Path, log: Callable[[str], None]):
    from transformers import TrainerCallback

    from unsloth_grpo.training.results import jsonable

    class SftMetrics(TrainerCallback):
        """metrics.jsonl rows and one short line per logged SFT step (instead of the raw dict)."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "loss" not in logs or "train_runtime" in logs:
                return
            row = {"step": state.global_step, **{k: v for k, v in logs.items() if jsonable(v)}}
            with path.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            acc = logs.get("mean_token_accuracy")
            log(f"sft step {state.global_step}/{state.max_steps} | loss {logs['loss']:.3f}"
                + (f" | token accuracy {acc:.3f}" if isinstance(acc, (int, float)) else ""))

    return SftMetrics()


def train_sft(cfg: RecipeConfig, loaded, *, num_examples: int, callbacks: list | None = None,
              log: Callable[[str], None] = print, resume: ckpt.CheckpointInfo | None = None,
              stage: tuple[int, str] = (0, None), hint: str | None = None, decision=None):
    """Supervised fine-tuning of ``loaded.model``'s adapter on formatted examples (TRL's SFTTrainer),
    through the one trainer loop (:func:`unsloth_grpo.training.loop.run_trainer`): signals, a full
    disk and out-of-memory end an SFT stage as they end a GRPO one. ``decision`` is the run's."""
    from trl import SFTTrainer

    from unsloth_grpo.config import dump_config
    from unsloth_grpo.training.loop import run_trainer
    from unsloth_grpo.runs import collect_bundle, write_bundle
    from unsloth_grpo.training.results import TrainResult
    from unsloth_grpo.training.trainer_args import sft_args

    t, info = cfg.training, loaded.info
    out = Path(cfg.output_dir)
    dataset = sft_dataset_for(cfg, num_examples)
    metrics_path = out / "metrics.jsonl"
    fresh_dir = not out.exists()
    if detect().is_main:
        out.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, out / "config.yaml")
        ckpt.clean_staging(out)
        if resume is not None:
            ckpt.trim_metrics(metrics_path, resume.step)
        elif metrics_path.exists():
            metrics_path.unlink()
        write_bundle(out, collect_bundle(cfg, dataset=dataset, backend=info.to_dict(), extra={"kind": "sft"}))
    args = sft_args(cfg, info)
    saver = ckpt.make_checkpoint_callback(out, keep_last=cfg.run.keep_last, stage=stage[0], stage_name=stage[1],
                                          log=log)
    trainer = SFTTrainer(model=loaded.model, processing_class=loaded.tokenizer, args=args, train_dataset=dataset,
                         callbacks=[_sft_metrics_callback(metrics_path, log), saver, *(callbacks or [])])
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    log(f"sft stage: {len(dataset)} formatted examples, {t.max_steps} steps, lr {t.learning_rate:g} -> {out}")
    start = time.time()
    run_trainer(trainer, cfg, saver, resume_from=resume, stage=stage, hint=hint, log=log, fresh_dir=fresh_dir,
                decision=decision)
    trainer.save_model(str(out))
    if trainer.is_world_process_zero():
        loaded.tokenizer.save_pretrained(str(out))
    metrics = [json.loads(x) for x in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
    return TrainResult(out, metrics, info.to_dict(), time.time() - start, trainer.state.global_step)


# ---------------------------------------------------------------- the stage runner


def _complete(d: Path) -> dict | None:
    try:
        info = json.loads((d / STAGE_COMPLETE).read_text())
    except (OSError, ValueError):
        return None
    return info if (d / "adapter_model.safetensors").is_file() else None


def plan_resume(cfg: RecipeConfig, resume) -> tuple[int, ckpt.CheckpointInfo | None]:
    """(first stage to run, checkpoint to resume it from or None), for ``resume`` as train() takes it."""
    n = len(cfg.stages)
    done = [_complete(stage_dir(cfg, i)) is not None for i in range(1, n + 1)]
    if resume is None or resume is False:
        if any(done) or ckpt.list_checkpoints(cfg.output_dir):
            raise ckpt.EarlierRun.over(cfg.output_dir, "stages or checkpoints of an earlier run")
        return 1, None
    info = ckpt.resolve_resume(resume, cfg.output_dir)
    first_open = next((i for i in range(1, n + 1) if not done[i - 1]), n + 1)
    explicit = not (resume is True or str(resume) == "latest")
    if info is not None and info.stage == 0:
        raise ckpt.CheckpointError(f"{info.path} belongs to a single-stage run, but this config has stages; "
                                   "resume it with the config it was trained with")
    if info is not None and (info.stage == first_open or (explicit and info.stage < first_open)):
        return info.stage, info
    if explicit and info is not None and info.stage > first_open:
        raise ckpt.CheckpointError(f"{info.path} is in stage {info.stage}, but stage {first_open} never finished")
    return first_open, None


def combined_metrics(cfg: RecipeConfig) -> list[dict]:
    rows, offset = [], 0
    for i, stage in enumerate(cfg.stages, 1):
        path = stage_dir(cfg, i) / "metrics.jsonl"
        last = 0
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                last = max(last, int(r.get("step", 0)))
                rows.append({**r, "step": offset + int(r.get("step", 0)), "stage": i, "stage_name": stage.name,
                             "stage_step": int(r.get("step", 0))})
        done = _complete(stage_dir(cfg, i))
        offset += int(done["steps"]) if done else last
    return rows


def summarize_stage(index: int, stage: StageConfig, result, change_l2: float | None, scfg: RecipeConfig) -> dict:
    """What a stage changed: its key metrics over the first vs last 5 logged steps, and the adapter."""
    keys = ["loss", "mean_token_accuracy"] if stage.kind == "sft" else \
        ["reward", *[f"rewards/{r.name}/mean" for r in scfg.rewards], "completions/mean_length"]
    changes = {}
    for key in keys:
        values = [r[key] for r in result.metrics if isinstance(r.get(key), (int, float))]
        if values:
            changes[key] = ends_compared(values)
    return {
        "stage": index, "name": stage.name, "kind": stage.kind, "steps": result.global_step,
        "learning_rate": scfg.training.learning_rate, "seconds": round(result.seconds, 2),
        "rewards": [{"name": r.name, "weight": r.weight} for r in scfg.rewards] if stage.kind == "grpo" else [],
        "metrics": changes, "adapter_change_l2": None if change_l2 is None else round(change_l2, 6),
    }


def describe_summary(summary: list[dict]) -> str:
    lines = []
    for s in summary:
        parts = [ends_words(k, v, ".3g") for k, v in s["metrics"].items()]
        change = "" if s["adapter_change_l2"] is None else f"; adapter moved {s['adapter_change_l2']:.3g} (L2)"
        lines.append(f"stage {s['stage']} {s['name']} ({s['kind']}, {s['steps']} steps, lr {s['learning_rate']:g}, "
                     f"{s['seconds']:.0f}s): " + ("; ".join(parts) or "no metrics logged") + change)
    return "\n".join(lines)


#: Where a stage's held-out grading is kept, as the run writes it: the run's start and end, each stage's own.
_EVAL_BEFORE, _EVAL_AFTER = "eval_before", "eval_after"


def _graded(*places: Path) -> dict | None:
    """The first of ``places`` that holds an evaluation (:func:`~unsloth_grpo.evaluation.evaluate.write_eval`)."""
    from unsloth_grpo.evaluation.evaluate import EVAL_FILE, read_eval

    for place in places:
        if (place / EVAL_FILE).is_file():
            return read_eval(place)
    return None


def add_held_out(cfg: RecipeConfig, summary: list[dict]) -> list[dict]:
    """Each stage's held-out change, where it was measured, added to its summary entry as ``held_out``:
    strict accuracy at the stage's start and end, and the problems it fixed and broke with the sign
    test's p. A stage's start is its own before-grading, else the previous stage's end (the run's
    start for the first); its end is its own after-grading, else the next stage's start (the run's end
    for the last). An SFT stage grades nothing itself, so its change is read between its neighbours'."""
    from unsloth_grpo.evaluation.evaluate import compare, sign_test

    run, n = Path(cfg.output_dir), len(cfg.stages)
    for entry in summary:
        i = entry["stage"]
        here = stage_dir(cfg, i)
        start = _graded(here / _EVAL_BEFORE, stage_dir(cfg, i - 1) / _EVAL_AFTER if i > 1 else run / _EVAL_BEFORE)
        end = _graded(here / _EVAL_AFTER, stage_dir(cfg, i + 1) / _EVAL_BEFORE if i < n else run / _EVAL_AFTER)
        if start is None or end is None:
            continue
        try:
            report = compare(start, end)
        except ValueError:  # graded on other problems (the evaluation settings changed on a resume)
            continue
        fixed, broken = len(report["fixed"]), len(report["broken"])
        entry["held_out"] = {"n": report["n"], "strict": [start["accuracy"], end["accuracy"]], "fixed": fixed,
                             "broken": broken, "p": sign_test(fixed, broken)}
    return summary


def closing_lines(summary: list[dict]) -> list[str]:
    """What each stage changed, one line each, for the run's last words: the reward (GRPO) or the loss
    (SFT) over its first and last 5 logged steps, and held-out accuracy from its start to its end
    where measured (:func:`add_held_out`); then one line naming each stage that lowered either."""
    lines, lowered = [], []
    for s in summary:
        key = "loss" if s["kind"] == "sft" else "reward"
        parts, fell = [], []
        m = s["metrics"].get(key)
        if m is not None:
            parts.append(ends_words(key, m))
            if key == "reward" and "first5" in m and m["last5"] < m["first5"]:
                fell.append(f"its reward ({m['first5']:.3f} -> {m['last5']:.3f})")
        h = s.get("held_out")
        if h is not None:
            a, b = h["strict"]
            verdict = "within noise" if h["p"] >= 0.05 else "more than chance flips"
            parts.append(f"held-out strict {a:.3f} -> {b:.3f} ({h['fixed']} fixed, {h['broken']} broken: {verdict}, "
                         f"sign test p={h['p']:.2g})")
            if b < a:
                fell.append(f"held-out accuracy ({a:.3f} -> {b:.3f})")
        label = f"stage {s['stage']} {s['name']} ({s['kind']}, {s['steps']} steps)"
        lines.append(f"{label}: " + ("; ".join(parts) or "no metrics logged"))
        if fell:
            lowered.append(f"stage {s['stage']} {s['name']} lowered " + " and ".join(fell)
                           + f" (its samples and report: {ckpt.STAGES_DIR}/{s['stage']:02d}-{s['name']}/)")
    return lines + [f"note: {line}" for line in lowered]


def prepare_stages(cfg: RecipeConfig, resume=None, *, dataset=None, lock=None,
                   log: Callable[[str], None] = print, plan=None) -> tuple[int, ckpt.CheckpointInfo | None]:
    """Where a multi-stage run starts (:func:`plan_resume`, or ``plan`` when the caller made it and
    checked it), and its directory laid out for it: the config and reproducibility bundle written, the
    stages that run again cleared of their completion marker, checkpoints off the path the run now
    takes set aside. ``lock`` is the run's lock, taken as soon as the run directory exists. Returns
    (first stage to run, checkpoint to resume it from).
    """
    from unsloth_grpo.config import dump_config
    from unsloth_grpo.runs import collect_bundle, write_bundle

    run = Path(cfg.output_dir)
    first, resume_from = plan if plan is not None else plan_resume(cfg, resume)
    n = len(cfg.stages)
    if detect().is_main:
        run.mkdir(parents=True, exist_ok=True)
        if lock is not None and not lock.held:
            lock.acquire()  # a new directory: nobody could have held it before it existed
        dump_config(cfg, run / "config.yaml")
        write_bundle(run, collect_bundle(cfg, dataset=dataset))
        for i in range(first, n + 1):  # stages that run (again): no stale completion marker or checkpoints
            d = stage_dir(cfg, i)
            (d / STAGE_COMPLETE).unlink(missing_ok=True)
            # checkpoints that the run will not continue from belong to an abandoned branch: moved
            # to the stage's abandoned/ folder (logged), never deleted
            if i == first and resume_from is not None:
                if resume_from.path.resolve().parent == ckpt.checkpoints_root(d).resolve():
                    ckpt.set_aside_later(d, resume_from.step, log,
                                         why=f"stage {i}: resuming from step {resume_from.step}")
            else:
                ckpt.set_aside_later(d, 0, log, why=f"stage {i} ({cfg.stages[i - 1].name}) runs again from "
                                                   f"its start (the run resumes at stage {first})")
        stale = run / ckpt.STAGES_DIR
        names = {stage_dirname(i, s) for i, s in enumerate(cfg.stages, 1)}
        for d in (stale.iterdir() if stale.is_dir() else []):
            if d.is_dir() and d.name not in names:
                log(f"note: {d} is not a stage of this config; it is left alone")
    if first > n:
        log(f"every stage of {run} is already complete; nothing to resume")
    else:
        where = f"stage {first} ({cfg.stages[first - 1].name})"
        log(f"stages: {n} in order -> {run}; starting at {where}"
            + (f" from {resume_from.path}" if resume_from else ""))
    return first, resume_from


def evaluation_start(cfg: RecipeConfig, loaded, first: int, resume_from, log: Callable[[str], None]):
    """With ``evaluation.before_after``, the model the whole run starts from graded on the held-out
    problems (``RUN/eval_before``), or that grading read back when the run resumes; (None, None) otherwise.
    Each GRPO stage still grades its own start and end: the run's report is base -> final."""
    from unsloth_grpo.evaluation.evaluate import EVAL_FILE, read_eval
    from unsloth_grpo.training.held_out import evaluate_held_out, held_out_rows

    if not cfg.evaluation.before_after or loaded is None or first > len(cfg.stages):
        return None, None
    where = Path(cfg.output_dir) / "eval_before"
    held_out = held_out_rows(cfg)
    if (first > 1 or resume_from is not None) and (where / EVAL_FILE).is_file():
        return held_out, read_eval(where)
    if first > 1 or resume_from is not None:
        return held_out, None  # the start was not graded before the interruption: no base to compare with
    log(f"evaluation: grading {loaded.info.model_name} on {len(held_out)} held-out problems before the first stage")
    return held_out, evaluate_held_out(cfg, loaded.model, loaded.tokenizer, held_out, where,
                                       name=f"{loaded.info.model_name} (before training)")


def evaluation_end(cfg: RecipeConfig, loaded, held_out, before: dict, log: Callable[[str], None], *,
                   headroom: dict | None = None) -> dict:
    """The final adapter graded (the last stage's own after-grading when it made one) and compared with
    the run's start: ``RUN/report.md`` (with the last GRPO stage's ``headroom``), one line, and the
    held-out summary."""
    from unsloth_grpo.evaluation.evaluate import EVAL_FILE, read_eval
    from unsloth_grpo.training.held_out import evaluate_held_out, report_before_after

    run = Path(cfg.output_dir)
    last = stage_dir(cfg, len(cfg.stages)) / "eval_after"
    if (last / EVAL_FILE).is_file():
        after = read_eval(last)
    else:
        after = evaluate_held_out(cfg, loaded.model, loaded.tokenizer, held_out, run / "eval_after",
                                  name=f"{loaded.info.model_name} + the adapter trained in {run}")
    log("evaluation of the whole run (the base model -> the last stage's adapter):")
    return report_before_after(before, after, run, log, headroom=headroom)


def read_summary(run: Path) -> list[dict]:
    try:
        return json.loads((run / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return []


def write_combined(cfg: RecipeConfig) -> None:
    rows = combined_metrics(cfg)
    path = Path(cfg.output_dir) / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


__all__ = ["STAGE_COMPLETE", "SUMMARY_FILE", "add_held_out", "change_l2", "closing_lines", "combined_metrics",
           "copy_adapter", "describe_summary",
           "evaluation_end", "evaluation_start", "load_adapter_weights", "lora_state", "plan_resume", "prepare_stages",
           "read_summary", "sft_dataset_for", "stage_config", "stage_dir", "stage_problems", "summarize_stage",
           "train_sft", "write_combined"]
