"""Training: the GRPO trainer wiring, stages, checkpoints, out-of-memory handling, the health
monitor, the progress line and the batch layout of a multi-process run."""
