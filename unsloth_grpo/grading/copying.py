"""What a completion took from its prompt instead of answering: the checks behind "no reward pays for
copying the prompt" and the monitor's trick warnings.

A policy under GRPO finds the cheapest completion a reward pays. Two cheap ones were seen on a real
135M model (docs/real_model.md): copying the system prompt's template, placeholder and all
(``<answer>\\nthe final number\\n</answer>``, repeated to the length limit), and writing the same
calculation for every problem. These functions name such completions; they never decide whether an
answer is right (that is :func:`unsloth_grpo.grading.grade`).

* :func:`answer_block_problem` - why an answer block holds no answer: none, empty, repeated, or the
  prompt's own placeholder. The format rewards pay nothing for such a block.
* :func:`prompt_placeholders` - the answer-block contents a prompt shows that are not answers
  (``...``, ``the final number``): text with no digit inside an answer block of the prompt.
* :func:`copied_share` - the share of a completion's words that repeat the system prompt in runs of
  at least :data:`COPY_RUN` words (one of them a word, not a number or a sign) found neither in the
  question nor in the gold answer, or in a whole stretch of numbers and signs that the prompt holds.
* :func:`answer_shape` - the completion with every number written ``N``: two completions with the
  same shape did the same thing to different numbers.
* :func:`copied_quantity` - the number of the question that a wrong answer repeats without having
  calculated it (``6`` for "6 minutes before lunch and 9 after", answered ``6``): a shortcut a
  135M model learned under GRPO on phrasings it had not trained on (issue 52).

Example::

    >>> system = "Reply as <answer>\\nthe final number\\n</answer>"
    >>> prompt = [{"role": "system", "content": system}, {"role": "user", "content": "2 + 3?"}]
    >>> answer_block_problem("<answer>\\nthe final number\\n</answer>", prompt)
    "the prompt's placeholder 'the final number'"
    >>> answer_block_problem("<answer>5</answer>", prompt) is None
    True
    >>> answer_shape("<reasoning>12 - 5 = 7</reasoning>")
    '<reasoning>N - N = N</reasoning>'
"""

from __future__ import annotations

import re
from typing import Any

from unsloth_grpo.grading.calculations import quantity_texts, worked_calculations
from unsloth_grpo.grading.locate import completion_text, content_text, extract_answer, tag_markers
from unsloth_grpo.grading.numbers import numbers_equal

#: :func:`answer_block_problem`'s word for a completion that has not closed an answer block at all: it
#: has not answered yet, which a format reward may still give partial credit for.
NO_ANSWER_BLOCK = "no answer block"

#: The shortest run of words that counts as copied from the system prompt (``the final number``).
COPY_RUN = 3

_WORD = re.compile(r"[A-Za-z]+|\d+(?:\.\d+)?|[^\sA-Za-z\d]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")
_ONLY_PUNCTUATION = re.compile(r"^[\W_]*$")


def prompt_texts(prompt: Any) -> tuple[str, str]:
    """``(system text, user text)`` of a prompt: chat messages, or a plain string (all of it user text)."""
    if prompt is None:
        return "", ""
    if isinstance(prompt, str):
        return "", prompt
    system, user = [], []
    for message in prompt if isinstance(prompt, (list, tuple)) else [prompt]:
        if isinstance(message, dict):
            text = content_text(message.get("content"))
            (system if message.get("role") == "system" else user).append(text)
    return "\n".join(system), "\n".join(user)


def _normal(text: str) -> str:
    return " ".join(text.split()).lower()


def _blocks(text: str, open_: str, close: str) -> list[str]:
    out, pos = [], 0
    while True:
        start = text.find(open_, pos)
        if start == -1:
            return out
        end = text.find(close, start + len(open_))
        if end == -1:
            return out
        out.append(text[start + len(open_):end])
        pos = end + len(close)


def prompt_placeholders(prompt: Any, answer_tag: str | tuple[str, str] = "answer") -> set[str]:
    """The contents of the prompt's answer blocks that hold no digit (``...``, ``the final number``),
    normalised (lower case, single spaces): what a model copying the prompt's template writes."""
    open_, close = tag_markers(answer_tag)
    system, user = prompt_texts(prompt)
    return {_normal(b) for b in _blocks(f"{system}\n{user}", open_, close)
            if b.strip() and not any(c.isdigit() for c in b)}


def answer_block_problem(completion: Any, prompt: Any = None, *,
                         answer_tag: str | tuple[str, str] = "answer") -> str | None:
    """Why ``completion``'s answer block holds no answer, or None when it holds one.

    The reasons: no closed answer block; more than one (a repeated template); an empty block or one of
    punctuation only (``...``); a block that repeats one of the prompt's placeholders
    (:func:`prompt_placeholders`). Whether the answer is right is not looked at.
    """
    text = completion_text(completion)
    open_, close = tag_markers(answer_tag)
    if text.count(open_) > 1 or text.count(close) > 1:
        return "repeated answer blocks"
    blocks = _blocks(text, open_, close)
    if not blocks:
        return NO_ANSWER_BLOCK
    content = blocks[0].strip()
    if not content or _ONLY_PUNCTUATION.match(content):
        return "an empty answer block" if not content else f"an answer block of punctuation only ({content[:20]!r})"
    if _normal(content) in prompt_placeholders(prompt, answer_tag):
        return f"the prompt's placeholder '{_normal(content)}'"
    return None


def _segments(text: str) -> list[list[str]]:
    """The words of ``text`` between its tags, one list per stretch: a run of copied words never
    spans a tag (the end of a worked example's reasoning and its answer are not one phrase)."""
    return [words for part in _TAG.split(text) if (words := [w.lower() for w in _WORD.findall(part)])]


def _runs(segments: list[list[str]], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for words in segments for i in range(len(words) - n + 1)}


def copied_share(completion: Any, prompt: Any, gold: Any = None) -> float:
    """The share of ``completion``'s words (tags aside) inside a run of :data:`COPY_RUN` or more words
    that the system prompt holds and neither the question nor ``gold`` does: 1.0 for a completion
    that is the prompt's example, over half for its template with placeholders, about 0 for one that
    works on its own problem. 0.0 when the prompt has no system text or the completion has fewer than
    :data:`COPY_RUN` words."""
    system, user = prompt_texts(prompt)
    segments = _segments(completion_text(completion))
    total = sum(len(words) for words in segments)
    if not system or total < COPY_RUN:
        return 0.0
    system_segments = _segments(system)
    own_segments = _segments(user) + ([] if gold is None else _segments(str(gold)))
    from_system, own = _runs(system_segments, COPY_RUN), _runs(own_segments, COPY_RUN)
    whole_system, whole_own = {tuple(w) for w in system_segments}, {tuple(w) for w in own_segments}
    copied = 0
    for words in segments:
        if not any(w.isalpha() for w in words):
            # numbers and signs only (an equation, an answer): copied when the whole stretch is one of the
            # prompt's, as a worked example's "3 + 4 = 7" is; "11 - 6 = 5" shares "- 6 =" with "15 - 6 = 9"
            # by arithmetic, not by copying
            if tuple(words) in whole_system and tuple(words) not in whole_own:
                copied += len(words)
            continue
        marked = [False] * len(words)
        for i in range(len(words) - COPY_RUN + 1):
            run = tuple(words[i:i + COPY_RUN])
            if run in from_system and run not in own and any(w.isalpha() for w in run):
                marked[i:i + COPY_RUN] = [True] * COPY_RUN
        copied += sum(marked)
    return copied / total


def copied_quantity(completion: Any, question: Any, gold: Any) -> str | None:
    """The quantity of ``question`` that ``completion`` answers with instead of a result, or None.

    A quantity counts as copied when the completion's answer (its answer block, read as the grader reads it)
    equals a number the question states, is not ``gold`` (a right answer that happens to be one of the
    question's numbers is not a copy, so without a gold nothing is called one), and is the result of no
    calculation the completion writes (``15 - 6 = 6`` is an arithmetic slip, not a copy). ``question`` is the
    question's text or its chat prompt (the user's turns).

    >>> copied_quantity("<reasoning>\\n6 minutes\\n</reasoning>\\n<answer>\\n6\\n</answer>",
    ...                 "Nadia read for 6 minutes before lunch and 9 minutes after lunch.", "15")
    '6'
    >>> copied_quantity("<reasoning>\\n6 + 9 = 15\\n</reasoning>\\n<answer>\\n15\\n</answer>",
    ...                 "Nadia read for 6 minutes before lunch and 9 minutes after lunch.", "15") is None
    True
    """
    if gold is None:
        return None
    answer = extract_answer(completion_text(completion))
    if answer is None or numbers_equal(answer, gold):
        return None
    asked = question if isinstance(question, str) else prompt_texts(question)[1]
    quantity = next((q for q in quantity_texts(asked) if numbers_equal(answer, q)), None)
    if quantity is None:
        return None
    if any(numbers_equal(c.stated, quantity) for c in worked_calculations(completion, asked)):
        return None
    return quantity


def answer_shape(completion: Any) -> str:
    """The completion with each number written ``N`` and its whitespace collapsed: what it did,
    whatever numbers it did it to."""
    return " ".join(_NUMBER.sub("N", completion_text(completion)).split())


__all__ = ["COPY_RUN", "NO_ANSWER_BLOCK", "answer_block_problem", "answer_shape", "copied_quantity", "copied_share",
           "prompt_placeholders", "prompt_texts"]
