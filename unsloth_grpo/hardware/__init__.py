"""The hardware layer: the only code that knows the card or imports unsloth / vllm. Backend choice
and model loading, the memory planner, the doctor's checks and export."""
