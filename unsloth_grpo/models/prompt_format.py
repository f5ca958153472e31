"""The prompt format of a model whose tokenizer has no chat template: a base model such as Gemma 3 270M.

Every task builds its prompts as chat messages (a system turn, a user turn), and TRL, the SFT warm-up,
evaluation and export render them with the tokenizer's chat template. A base model has none: the file of
``builtin:gemma3-270m`` carries no template, and transformers refuses to render messages without one.
Rather than a second prompt path for such models, they get this small template, stated here and saved
with every adapter and merged model trained from them:

    <bos>{system}\n\nQuestion: {user}\nAnswer: {assistant}<eos>\n\n

with the generation prompt ending at ``Answer:``. It is the plain question/answer layout a pretrained
model has seen in its training text (Gemma 3 270M answers ``Question: What is 2 + 3?\nAnswer:`` with
`` 2 + 3 = 5`` untrained), and an assistant turn ends with the tokenizer's own eos token, so the SFT
warm-up teaches the model where an answer ends and generation stops there. An untrained base model
does not stop on its own: it goes on with the next ``Question:`` until the token limit.

The rendered generation prompt is a prefix of the rendered conversation, token for token (``Answer:``
then ``▁...``), as TRL's prompt/completion SFT needs. Roles other than system, user and assistant
(tool calls) are refused with a message: a base model has no format for them.
"""

from __future__ import annotations

#: The template given to a tokenizer that has none (see the module docstring).
PLAIN_TEMPLATE = (
    "{{ bos_token or '' }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ message['content'] + '\n\n' }}"
    "{%- elif message['role'] == 'user' -%}{{ 'Question: ' + message['content'] + '\n' }}"
    "{%- elif message['role'] == 'assistant' -%}{{ 'Answer: ' + message['content'] + eos_token + '\n\n' }}"
    "{%- else -%}{{ raise_exception('the plain prompt format of a model without a chat template has system, "
    "user and assistant turns only, not ' + message['role']) }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Answer:' }}{%- endif -%}"
)


def ensure_chat_template(tokenizer):
    """Give ``tokenizer`` :data:`PLAIN_TEMPLATE` when it has no chat template; a template it has is kept."""
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = PLAIN_TEMPLATE
    return tokenizer


__all__ = ["PLAIN_TEMPLATE", "ensure_chat_template"]
