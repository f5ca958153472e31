"""The hardware layer: the only code that knows the card or imports unsloth / vllm. Card profiles and the
decisions made from them, backend choice and model loading, the memory planner, the doctor's checks and export."""
