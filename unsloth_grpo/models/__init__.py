"""Built-in models: the ones a ``builtin:`` model name selects, made on this machine without a hub.

:mod:`unsloth_grpo.models.builtin` builds the tiny models (``builtin:tiny`` and its variants) that
the smoke presets, the tests and the CPU demos train. Which name builds which model is decided by
the loader (:func:`unsloth_grpo.hardware.backend.resolve_model_path`).
"""
