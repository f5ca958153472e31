"""Training: the GRPO trainer wiring, stages, checkpoints, out-of-memory handling, the health
monitor, the progress line, the process layout and the reproducibility bundle."""
