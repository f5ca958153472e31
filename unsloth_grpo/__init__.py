"""unsloth-grpo: GRPO reasoning and format training on one consumer GPU.

Importing the package is cheap and imports none of torch, transformers, TRL or peft: the
backend layer (:mod:`unsloth_grpo.hardware.backend`) imports Unsloth first when it is used, as
Unsloth requires.
"""

__version__ = "0.1.0"
