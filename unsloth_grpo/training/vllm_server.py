"""Generation on a vLLM server from a CPU: TRL's server mode with the LoRA adapter as the weight sync.

``model.vllm_server`` on a machine without a CUDA card, with vLLM's CPU build installed
(:func:`unsloth_grpo.hardware.profiles.vllm_choice` decides it), generates the rollouts on a separate
vLLM server (docs/vllm-cpu.md: "The server layout") and trains here. TRL 1.14's server mode moves the
weights over NCCL (``VLLMClient.init_communicator`` refuses a device that is not CUDA), and its client has
no route for an adapter; so :func:`served_on_cpu` puts TRL's ``VLLMGeneration`` with two methods changed in
place while the trainer is built:

- ``_init_vllm``: an HTTP client of the server (:class:`AdapterServer`) instead of TRL's NCCL group;
- ``sync_weights``: the adapter saved to a new folder under the run (``OUTPUT/vllm-adapters/NNNNN``) and
  loaded into the server under a new name (``/v1/load_lora_adapter``); the previous one is unloaded and its
  folder removed. A new name and a new path each time: vLLM's prefix cache is keyed by both, so no block
  computed with older weights is reused, and the engine loads each adapter once (read in vLLM 0.32's source:
  an adapter loaded "in place" keeps ``load_inplace`` on the request every generation carries, and the
  worker's LRU manager then reloads it from disk for every batch that names it).

TRL's own ``generate`` is kept (the gather to rank 0, one request of ``n`` completions per prompt, the
broadcast and the slicing back): the client answers its ``generate`` call as TRL's ``VLLMClient`` does,
naming the newest adapter. The rollout check (:class:`ServerSyncCheck`) scores its probe completions with
the server's ``prompt_logprobs`` for that adapter.

Whole weights (no LoRA) have no route here: TRL sends them over NCCL only, and vLLM's server reloads weights
from disk only from the path it started with. Such a model is refused when the trainer is built.
"""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from unsloth_grpo.hardware.vllm_server import ServerClient
from unsloth_grpo.training.vllm_cpu import SyncCheck, probe_prompt_ids, trainer_generation_class

#: Where a run keeps the adapter the server holds (inside its output directory).
ADAPTER_DIR = "vllm-adapters"
#: Tokens of the probe completions (as the colocated check makes them).
PROBE_TOKENS = 12
FULL_WEIGHTS = ("model.vllm_server on a CPU sends the LoRA adapter to the server after each step; this model has "
                "no adapter, and whole weights have no route to the server without NCCL (CUDA). Train a LoRA "
                "(the toolkit's runs always do), or generate in this process (model.vllm_server unset)")


class AdapterServer:
    """The trainer's side of the server: the adapter it holds, and TRL's client calls answered over HTTP.

    ``name`` is what every request names: the served base model until the first adapter is loaded."""

    def __init__(self, client: ServerClient, folder: Path, *, tag: str | None = None):
        self.client, self.folder = client, Path(folder)
        self.tag = tag or f"grpo-{uuid.uuid4().hex[:8]}"
        models = client.models()
        self.base = models[0]["id"] if models else None  # the served name; ``root``: what it loaded
        self.root = (models[0].get("root") or self.base) if models else None
        self.name, self.path, self.count = self.base, None, 0

    # ------------------------------------------------------------ the sync
    def sync(self, model) -> None:
        """Save ``model``'s adapter to a new folder and load it into the server; the previous one goes."""
        self.count += 1
        folder = self.folder / f"{self.count:05d}"
        if folder.exists():
            shutil.rmtree(folder)
        model.save_pretrained(str(folder))
        self._send(f"{self.tag}-{self.count}", folder)

    def _send(self, name: str, folder: Path) -> None:
        """Load the saved adapter under ``name``; then unload the previous adapter and remove its folder."""
        self.client.load_adapter(name, str(folder.resolve()))
        old_name, old_path = self.name, self.path
        self.name, self.path = name, folder
        if old_path is not None:
            with contextlib.suppress(Exception):  # the new one is loaded: a leftover costs memory, nothing else
                self.client.unload_adapter(old_name)
            shutil.rmtree(old_path, ignore_errors=True)

    def close(self) -> None:
        """Unload the adapter and remove the adapter folder (the run's own weights are in its checkpoints)."""
        if self.path is not None:
            with contextlib.suppress(Exception):
                self.client.unload_adapter(self.name)
        shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------ TRL's VLLMClient calls
    def generate(self, prompts: list, features=None, *, structured_outputs_regex: str | None = None,
                 generation_kwargs: dict | None = None, **sampling) -> dict[str, list]:
        """TRL's ``VLLMClient.generate`` for token-id prompts, naming the adapter: the same keyword arguments
        (``n``, ``temperature``, ``max_tokens``, ``logprobs`` ...: fields of vLLM's completions request, sent
        as they come) and the same answer."""
        from trl.generation.vllm_client import parse_logprobs

        if features is not None:
            raise NotImplementedError("images are not sent to the vLLM server from a CPU run")
        body = {"model": self.name, "prompt": prompts, "n": 1, **sampling, "return_token_ids": True,
                "return_tokens_as_token_ids": True}
        if structured_outputs_regex is not None:
            body["structured_outputs"] = {"regex": structured_outputs_regex}
        body.update(generation_kwargs or {})
        choices, n = self.client.completions(body), body["n"]
        lps, lp_ids = parse_logprobs([c["logprobs"] for c in choices])
        return {"prompt_ids": [c["prompt_token_ids"] for c in choices[::n]],
                "completion_ids": [c["token_ids"] for c in choices], "logprobs": lps, "logprob_token_ids": lp_ids}

    def reset_prefix_cache(self) -> None:
        """Nothing to reset: the cache is keyed by the adapter's name and path, both new at every sync."""

    # ------------------------------------------------------------ the rollout check's engine calls
    def greedy(self, prompts: list[list[int]], max_tokens: int = PROBE_TOKENS) -> list[list[int]]:
        choices = self.client.completions({"model": self.name, "prompt": prompts, "max_tokens": max_tokens,
                                           "temperature": 0.0, "return_token_ids": True})
        return [list(c["token_ids"]) for c in choices]

    def prompt_logprobs(self, sequences: list[tuple[list[int], int]]) -> list[list[float]]:
        """The server's log-probability of each completion token (``prompt_logprobs`` of the whole sequence).

        One sequence per request, one request at a time: vLLM 0.32's CPU LoRA kernels score prompt tokens with
        the adapter indices of the batch's requests, and with two requests in a batch its engine dies
        (``einsum(): subscript b has size 2 ... 49`` in ``bgmv_shrink``, SmolLM2 with a LoRA adapter)."""
        out = []
        for seq, start in sequences:
            (choice,) = self.client.completions({"model": self.name, "prompt": [seq], "max_tokens": 1,
                                                 "temperature": 1.0, "prompt_logprobs": 0})
            out.append([choice["prompt_logprobs"][i][str(seq[i])]["logprob"] for i in range(start, len(seq))])
        return out


def server_probe(tokenizer, server: AdapterServer) -> list[tuple[list[int], int]]:
    """The probe completions: the server's greedy answers to the probe prompts, with the adapter it holds."""
    ids = probe_prompt_ids(tokenizer)
    return [(i + out, len(i)) for i, out in zip(ids, server.greedy(ids))]


class ServerSyncCheck(SyncCheck):
    """:class:`SyncCheck` with the server as the engine (same tolerance, metrics and warning)."""

    make_probe = staticmethod(server_probe)
    engine_scores = staticmethod(lambda server, sequences: server.prompt_logprobs(sequences))


def _server_generation_class():
    """TRL's ``VLLMGeneration`` in server mode, with the adapter as the weight sync (made on first use)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import trl.generation.vllm_generation as trl_generation
    from peft import PeftModel

    class ServerVLLMGeneration(trl_generation.VLLMGeneration):
        """TRL's server mode on a CPU: an HTTP client instead of NCCL, the adapter instead of the weights."""

        #: The run's output directory (set by :func:`served_on_cpu`); the adapters go under it.
        output_dir: str = "."
        #: The rollout check this engine takes (:func:`unsloth_grpo.training.vllm_cpu.watch_sync`).
        check_class = ServerSyncCheck
        after_sync: list[Callable[[Any], None]]

        def _init_vllm(self):
            if self.mode != "server":
                raise ValueError(f"the CPU server layout runs TRL's server mode, not {self.mode!r}")
            if not isinstance(self.model, PeftModel):
                raise ValueError(FULL_WEIGHTS)
            self.after_sync, self.last_sync_s = [], 0.0
            base = self.server_base_url or f"http://{self.server_host}:{self.server_port}"
            # every rank scores its rollout check on the server; rank 0 alone sends the adapter and generates
            self.llm = AdapterServer(ServerClient(base), Path(self.output_dir) / ADAPTER_DIR)
            if self.accelerator.is_main_process:
                self.vllm_client = self.llm
            self.accelerator.wait_for_everyone()

        def sync_weights(self):
            from accelerate.utils import broadcast_object_list

            start = time.perf_counter()
            if self.accelerator.is_main_process:  # the adapter is the same on every rank
                self.vllm_client.sync(self.model)
            if self.accelerator.num_processes > 1:  # the name the other ranks' checks ask the server for
                name = [self.llm.name]
                broadcast_object_list(name, from_process=0)
                self.llm.name = name[0]
            self.last_sync_s = time.perf_counter() - start
            for hook in self.after_sync:
                hook(self)

    _CLASS = ServerVLLMGeneration
    return _CLASS


_CLASS = None


def server_start_line(cfg, model_path: str, host: str, port: int) -> str:
    """The command that starts the vLLM server ``cfg`` generates on from a CPU, serving ``model_path`` (one
    line, for messages)."""
    from unsloth_grpo.hardware.vllm_server import lora_rank_for_server, serve_command, shell_line

    env, argv = serve_command(model_path, host=host, port=port,
                              max_lora_rank=lora_rank_for_server(cfg.lora.max_lora_rank or cfg.lora.r),
                              max_model_len=cfg.model.max_seq_length)
    return shell_line(env, argv)


@contextlib.contextmanager
def served_on_cpu(output_dir: str, log: Callable[[str], None] = print) -> Iterator[None]:
    """While a ``GRPOTrainer`` is built inside it, TRL's server-mode generation is the adapter one
    (:func:`_server_generation_class`), writing its adapters under ``output_dir``."""
    cls = type("ServerVLLMGeneration", (_server_generation_class(),), {"output_dir": str(output_dir)})
    with trainer_generation_class(cls):
        yield


__all__ = ["ADAPTER_DIR", "AdapterServer", "FULL_WEIGHTS", "ServerSyncCheck", "served_on_cpu", "server_probe",
           "server_start_line"]
