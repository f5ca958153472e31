"""Nothing in the package may assume the one real model it was first built on (SmolLM2-135M-Instruct).

The first half scans the source: no module hard-codes SmolLM2's vocabulary size, an end/pad/bos token id,
or its ChatML template text, outside an explicit allow-list of places where that text is data (the tiny
models' own template, the chat layouts the Ollama export recognises by rendering). The second half runs
both real models' tokenizers and configs through the code that reads them (slow: each is converted once).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "unsloth_grpo"
#: SmolLM2-135M's vocabulary size.
SMOLLM2_VOCAB = 49152
#: Its template's markers (its eos ``<|im_end|>`` is one of them).
CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")
#: Where the markers are data, not an assumption about the model being trained, and why.
ALLOWED_TEMPLATE_TEXT = {
    "models/builtin.py": "the tiny built-in models' own ChatML template and special tokens",
    "export/gguf_ollama.py": "the ChatML layout the Ollama export recognises by rendering a model's template",
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _token_id_name(node) -> str | None:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
        node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
    return name if name and name.lower().endswith(("eos_token_id", "pad_token_id", "bos_token_id")) else None


def _is_int(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def hard_coded(rel: str, tree) -> list[str]:
    """What ``tree`` hard-codes of SmolLM2: its vocabulary size, a token id given as a literal, its template."""
    found, docs = [], _docstrings(tree)
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if _is_int(node) and node.value == SMOLLM2_VOCAB:
            found.append(f"{where}: the vocabulary size {SMOLLM2_VOCAB}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and any(m in node.value for m in CHATML_MARKERS) and rel not in ALLOWED_TEMPLATE_TEXT:
            found.append(f"{where}: ChatML template text {node.value[:40]!r}")
        elif isinstance(node, ast.keyword) and node.arg and _token_id_name(ast.Name(node.arg)) and _is_int(node.value):
            found.append(f"{where}: {node.arg}={node.value.value}")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and _is_int(node.value) and any(_token_id_name(t) for t in targets):
                found.append(f"{where}: a token id assigned the literal {node.value.value}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_token_id_name(s) for s in sides) and any(_is_int(s) for s in sides):
                found.append(f"{where}: a token id compared with a literal")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if key is not None and _token_id_name(key) and _is_int(value):
                    found.append(f"{where}: {key.value}: {value.value}")
    return found


def test_no_module_hard_codes_smollm2s_vocabulary_token_ids_or_template():
    found = [hit for rel, tree in _modules() for hit in hard_coded(rel, tree)]
    assert found == [], "read these from the tokenizer or the model's config instead:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_assumption():
    """The scan itself can fail: each pattern it looks for, planted in a stand-in module, is reported."""
    source = '''
"""A docstring may say <|im_end|> and 49152."""
VOCAB = 49152
def f(tok, model):
    if tok.eos_token_id == 2:
        pass
    model.generation_config.pad_token_id = 2
    text = "<|im_start|>user\\n" + "x"
    return dict(eos_token_id=2), {"bos_token_id": 1}
'''
    found = hard_coded("fake.py", ast.parse(source))
    assert sorted(hit.split(": ", 1)[1].split(" '")[0] for hit in found) == [
        "ChatML template text", "a token id assigned the literal 2", "a token id compared with a literal",
        "bos_token_id: 1", "eos_token_id=2", "the vocabulary size 49152"]
    assert hard_coded("models/builtin.py", ast.parse('T = "<|im_start|>"')) == []  # allowed there


# ------------------------------------------------------------------ both real models through the code that reads them

#: What each real model's own files say, and what the code must make of them (seen on the converted checkpoints).
REAL = {
    "smollm2": dict(model_type="llama", vocab=49152, params=134_515_008, eos="<|im_end|>", pad="<|im_end|>",
                    chat="chatml"),
    "gemma3": dict(model_type="gemma3_text", vocab=262144, params=268_098_176, eos="<eos>", pad="<pad>", chat=None),
}


@pytest.mark.slow
@pytest.mark.parametrize("which", sorted(REAL))
def test_each_real_models_tokenizer_and_config_go_through_the_code_that_reads_them(which, request):
    """The eos/pad rule, the parameter count the planner and memory guard use, the probe prompt of the export's
    check and the Ollama chat format, each on what the model's own files say."""
    from transformers import AutoTokenizer

    from unsloth_grpo.export import probe_text
    from unsloth_grpo.export.gguf_ollama import chat_format
    from unsloth_grpo.export.gguf_vocab import prepared_tokenizer
    from unsloth_grpo.hardware.architecture import count_parameters, meta_parameter_count

    want, folder = REAL[which], Path(request.getfixturevalue(f"{which}_dir"))
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["vocab_size"]) == (want["model_type"], want["vocab"])
    assert count_parameters(config) == meta_parameter_count(config) == want["params"]
    tok = prepared_tokenizer(folder)  # the tokenizer as training, evaluation and export see it
    generation = json.loads((folder / "generation_config.json").read_text())
    assert tok.eos_token_id == generation["eos_token_id"] and len(tok) == config["vocab_size"]
    assert (tok.eos_token, tok.pad_token, tok.padding_side) == (want["eos"], want["pad"], "left")
    assert chat_format(tok) == want["chat"]
    probe = probe_text(tok)
    if want["chat"]:
        assert probe == AutoTokenizer.from_pretrained(folder).apply_chat_template(
            [{"role": "user", "content": "What is 15 + 27?"}], tokenize=False, add_generation_prompt=True)
    else:  # a base model: its file has no template, so the load gives it the plain question/answer format
        from unsloth_grpo.models.prompt_format import PLAIN_TEMPLATE

        assert AutoTokenizer.from_pretrained(folder).chat_template is None and tok.chat_template == PLAIN_TEMPLATE
        assert probe == f"{tok.bos_token}Question: What is 15 + 27?\nAnswer:"
