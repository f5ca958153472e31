"""A loaded tokenizer made ready for training, evaluation and inference: its eos, pad, padding side and
chat template settled in one place (every load calls :func:`prepare_tokenizer`)."""

from __future__ import annotations

from typing import Any

from unsloth_grpo.models.prompt_format import ensure_chat_template


def prepare_tokenizer(tokenizer, model=None) -> Any:
    """The one place a loaded tokenizer is made ready for training, evaluation and inference.

    - eos: when the model's generation config names end-of-sequence tokens and the tokenizer's
      eos is not one of them, the generation config wins. A chat model's turn ends with its
      end-of-turn token, and the generation config is what the model was released with; a
      tokenizer converted from another format can carry a wrong one (SmolLM2's GGUF file says
      ``<|im_start|>``, the token that *opens* a turn, and its generation config says ``<|im_end|>``).
      TRL, the SFT trainer and everyone who loads the saved adapter or merged model read the
      tokenizer's eos, so it must be the right one.
    - pad: the eos token when the tokenizer has none, or when its pad was the wrong eos (padding
      is masked out, so sharing the id is harmless; a pad that opens a turn would be confusing).
    - left padding: batched generation must end every prompt where its completion starts.
    - a chat template: a base model's tokenizer without one gets the plain question/answer format of
      :mod:`unsloth_grpo.models.prompt_format`, whose answers end with the eos token set here.
    """
    gen = getattr(model, "generation_config", None) if model is not None else None
    eos = getattr(gen, "eos_token_id", None)
    eos_ids = [i for i in (eos if isinstance(eos, (list, tuple)) else [eos]) if isinstance(i, int)]
    wrong = tokenizer.eos_token
    if eos_ids and tokenizer.eos_token_id not in eos_ids and eos_ids[0] < len(tokenizer):
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_ids[0])
    # no pad, or a loader already made the wrong eos the pad (Unsloth does): pad with the eos
    if tokenizer.pad_token is None or (tokenizer.pad_token == wrong and wrong != tokenizer.eos_token):
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return ensure_chat_template(tokenizer)
