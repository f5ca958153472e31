"""Where the reasoning_gym task's grade differs from reasoning-gym's own score_answer, and on what answers.

For every dataset reasoning-gym registers (``composite`` aside), a few entries are generated (seed 0) and
a few adversarial answers are built from each entry's own answer and another entry's: the answer with
words around it, two answers joined by "or", by a comma, a space or a new line, a negation, another
entry's answer, and a line of Python that touches a marker file. Each is scored by the dataset's
``score_answer`` (given the answer region, as the task gives it) and graded by the task's
:func:`~unsloth_grpo.tasks.reasoning_gym.grade` (given the same region in ``<answer>`` tags).

It prints Markdown tables (docs/reasoning-gym.md holds them): the (dataset, kind of answer) pairs that
reasoning-gym pays in full and the grade does not, with the grade's rule; for each kind of answer, the
datasets where reasoning-gym pays partial credit (the grade never does); and the pairs both pay in full
(holes neither closes). Then for which datasets reasoning-gym ran the marker line.

    python benchmarks/reasoning_gym_grading.py            # about a minute on one core   # [long]
    python benchmarks/reasoning_gym_grading.py --entries 2 chain_sum word_sorting
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path


def adversarial(oracle: str | None, other: str | None, marker: Path) -> dict[str, str]:
    """Answers that are not one committed right answer, by kind (those that need an answer when there is one)."""
    code = f"__import__('pathlib').Path('{marker}').touch()"
    if oracle is None:
        return {"code": code}
    kinds = {"words_around": f"The answer is {oracle}", "or": f"{oracle} or {other}", "comma": f"{oracle}, {other}",
             "space": f"{oracle} {other}", "newline": f"{oracle}\n{other}", "negation": f"not {oracle}",
             "code": code}
    if other is not None and other.strip() != oracle.strip():
        kinds["other_entry"] = other
    return kinds


def _short(answer: str) -> str:
    return " ".join(answer.split())[:48].replace("|", "\\|")


def _fmt(scores: list[float]) -> str:
    return ", ".join(f"{s:.3g}" for s in sorted(set(scores)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=3, help="entries generated per dataset")
    parser.add_argument("names", nargs="*", help="datasets (default: every one reasoning-gym registers)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    from reasoning_gym.factory import DATASETS

    from unsloth_grpo.tasks import reasoning_gym as rg
    from unsloth_grpo.tasks._task import reasoned_completion

    names = args.names or sorted(n for n in DATASETS if n not in rg.REFUSED)
    differ: dict[tuple[str, str], dict] = defaultdict(lambda: {"rg": [], "ours": set(), "example": ""})
    both: dict[tuple[str, str], str] = {}
    ran: list[str] = []
    tmp = tempfile.gettempdir()  # a fixed place: the marker's path is part of the answer, and of its scores
    with contextlib.redirect_stdout(io.StringIO()):  # a few scorers print what they refuse
        for name in names:
            rows = [dict(r) for r in rg.load_reasoning_gym([{"name": name}], num_synthetic=args.entries, seed=0)]
            golds = [rg.decode_gold(r["answer"]) for r in rows]
            marker = Path(tmp) / f"reasoning-gym-ran-{name}"
            for i, gold in enumerate(golds):
                other = golds[(i + 1) % len(golds)].oracle
                scorer = rg._scorer(gold.name, gold.config)
                for kind, answer in adversarial(gold.oracle, other, marker).items():
                    try:
                        score = float(scorer.score_answer(answer, rg.decode_gold(rows[i]["answer"]).entry))
                    except Exception:  # noqa: BLE001 - reasoning-gym's own scorer raising counts as 0
                        score = 0.0
                    verdict = rg.grade(reasoned_completion(answer), rows[i]["answer"])
                    if (score >= 1.0) != verdict.correct or 0 < score < 1:
                        d = differ[(name, kind)]
                        d["rg"].append(score)
                        d["ours"].add(f"{'right' if verdict.correct else 'wrong'} ({verdict.rule})")
                        d["example"] = d["example"] or answer.replace(tmp, "TMP")
                    elif score >= 1.0 and verdict.correct and kind != "other_entry":
                        both.setdefault((name, kind), answer.replace(tmp, "TMP"))
            if marker.exists():
                ran.append(name)
                os.remove(marker)
    full = {k: d for k, d in differ.items() if max(d["rg"]) >= 1.0}
    print(f"## Answers reasoning-gym pays in full and the grade does not ({len(names)} datasets, "
          f"{args.entries} entries each)\n")
    print("| dataset | answer | example | reasoning-gym's scores | our grade |")
    print("|---|---|---|---|---|")
    for (name, kind), d in sorted(full.items()):
        print(f"| {name} | {kind} | `{_short(d['example'])}` | {_fmt(d['rg'])} | {'; '.join(sorted(d['ours']))} |")
    print("\n## Partial credit: datasets where reasoning-gym pays some but not all of the reward (the grade pays 0)\n")
    print("| answer | datasets | of them |")
    print("|---|---|---|")
    kinds = sorted({kind for _, kind in differ})
    for kind in kinds:
        partial = sorted(name for (name, k), d in differ.items() if k == kind and any(0 < x < 1 for x in d["rg"]))
        shown = ", ".join(partial[:6]) + (f", ... ({len(partial) - 6} more)" if len(partial) > 6 else "")
        print(f"| {kind} | {len(partial)} | {shown} |")
    print(f"\n## Adversarial answers both pay in full ({len(both)})\n")
    print("| dataset | answer | example |")
    print("|---|---|---|")
    for (name, kind), answer in sorted(both.items()):
        print(f"| {name} | {kind} | `{_short(answer)}` |")
    print(f"\nreasoning-gym's score_answer ran the answer's Python (the marker file appeared) for: "
          f"{', '.join(ran) or 'none'}; the grade refused it before score_answer for every dataset.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
