"""``unsloth-grpo serve MODEL``: the vLLM server a CPU run with ``model.vllm_server`` generates on.

Prints the command (its environment and arguments, :func:`unsloth_grpo.hardware.vllm_server.serve_command`)
for the model a run trains, as the run will name it; ``--start`` runs it in this terminal instead. A built-in
model is made ready first (fetched and converted once), so the server and the run load the same folder.
"""

from __future__ import annotations

import os
import sys

from unsloth_grpo.cli.arguments import in_range


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("serve", help="Print (or --start) the vLLM server command of a CPU run's model.",
                              description="The vLLM server that a run with model.vllm_server=HOST:PORT generates on "
                                          "from a CPU: float32, eager, LoRA adapters loaded at run time "
                                          "(docs/vllm-cpu.md, 'The server layout').")
    p.add_argument("model", help="The run's model.name (a built-in name, a local folder or a hub id).")
    p.add_argument("--host", default="127.0.0.1", help="Address the server listens on (default 127.0.0.1).")
    p.add_argument("--port", type=in_range(int, 1, 65535, "the server's TCP port", "8000"), default=8000,
                   help="TCP port (default 8000); the run's model.vllm_server is HOST:PORT.")
    p.add_argument("--lora-rank", type=in_range(int, 1, None, "the run's LoRA rank", "16"), default=16,
                   help="The run's lora.r (or lora.max_lora_rank), default 16.")
    p.add_argument("--max-model-len", type=in_range(int, 16, None, "the longest prompt + completion", "1024"),
                   default=1024, help="The run's model.max_seq_length (default 1024).")
    p.add_argument("--start", action="store_true", help="Start the server here instead of printing the command.")
    p.set_defaults(func=run)


def run(args) -> int:
    from unsloth_grpo.hardware.vllm_server import lora_rank_for_server, serve_command, shell_line
    from unsloth_grpo.models.ref import BackendError, model_ref

    ref = model_ref(args.model)
    try:
        path = ref.path(log=lambda line: print(line, file=sys.stderr)) if ref.is_builtin else ref.served_path
    except BackendError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env, argv = serve_command(path, port=args.port, host=args.host, max_model_len=args.max_model_len,
                              max_lora_rank=lora_rank_for_server(args.lora_rank))
    if not args.start:
        print(shell_line(env, argv))
        return 0
    os.execve(argv[0], argv, {**os.environ, **env})  # replaces this process: Ctrl-C stops the server
