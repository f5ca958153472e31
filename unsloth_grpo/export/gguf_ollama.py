"""An Ollama ``Modelfile`` beside a GGUF file: FROM, the chat TEMPLATE in Go template syntax, SYSTEM, stops.

    from unsloth_grpo.export.gguf_ollama import write_modelfile
    write_modelfile(Path("exports/smoke-gguf/model-q8_0.gguf"), Path("exports/smoke"))
    # then: cd exports/smoke-gguf && ollama create smoke -f Modelfile

The chat format is read by rendering the model's own chat template: ChatML (SmolLM2, Qwen) and Llama 3
get a TEMPLATE that lays a conversation out the same way; a template that adds a system message by
itself (SmolLM2's) gives the Modelfile the same default SYSTEM. Other formats get no TEMPLATE, and
Ollama falls back to the chat template stored in the GGUF file.
"""

from __future__ import annotations

from pathlib import Path

from unsloth_grpo.export.gguf_vocab import prepared_tokenizer


def chat_format(tokenizer) -> str | None:
    """'chatml' or 'llama3' when the chat template renders that layout, else None (read by rendering it)."""
    if not tokenizer.chat_template:
        return None
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    try:
        text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that needs other variables: no Ollama template then
        return None
    if text.endswith("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"):
        return "chatml"
    if text.endswith("<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n"):
        return "llama3"
    return None


def default_system_prompt(tokenizer, fmt: str) -> str | None:
    """The system message the template adds by itself when the conversation has none (SmolLM2 does)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "U"}], tokenize=False, add_generation_prompt=True)
    if fmt == "chatml" and "<|im_start|>system\n" in text:
        return text.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    if fmt == "llama3" and "<|start_header_id|>system<|end_header_id|>\n\n" in text:
        return text.split("<|start_header_id|>system<|end_header_id|>\n\n", 1)[1].split("<|eot_id|>", 1)[0]
    return None


#: Ollama templates (Go text/template) that lay out a conversation as each chat format does.
OLLAMA_TEMPLATES = {
    "chatml": ("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n"
               "{{ end }}<|im_start|>assistant\n"),
    "llama3": ("{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n{{ .Content }}<|eot_id|>"
               "{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n"),
}


def modelfile(gguf_name: str, tokenizer) -> str:
    """An Ollama ``Modelfile`` for the GGUF file: FROM, the chat TEMPLATE, the default SYSTEM, stop tokens."""
    fmt = chat_format(tokenizer)
    stops = [tokenizer.eos_token] + (["<|im_start|>"] if fmt == "chatml" else [])
    lines = [f"# Ollama: ollama create NAME -f Modelfile (written by unsloth-grpo export)", f"FROM ./{gguf_name}"]
    if fmt is not None:
        lines.append(f'TEMPLATE """{OLLAMA_TEMPLATES[fmt]}"""')
        system = default_system_prompt(tokenizer, fmt)
        if system:
            lines.append(f'SYSTEM """{system}"""')
    else:
        lines.append("# no TEMPLATE: the chat template is not ChatML or Llama 3; Ollama reads the one in the GGUF file")
    for s in dict.fromkeys(stops):
        lines.append(f'PARAMETER stop "{s}"')
    return "\n".join(lines) + "\n"


def write_modelfile(gguf_file: Path, model_dir: Path) -> Path:
    path = gguf_file.parent / "Modelfile"
    path.write_text(modelfile(gguf_file.name, prepared_tokenizer(model_dir)))
    return path


__all__ = ["OLLAMA_TEMPLATES", "chat_format", "default_system_prompt", "modelfile", "write_modelfile"]
