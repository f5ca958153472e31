"""The hardware layer: the only code that knows the card or imports unsloth / vllm. Card profiles and the
decisions made from them, backend choice and model loading, the memory planner and the doctor's checks.
Export (merge, GGUF, the model card) is its own wing, :mod:`unsloth_grpo.export`, which loads through here."""
