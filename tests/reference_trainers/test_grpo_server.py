"""GRPO with its rollouts on a vLLM-style server: tokens in and out over ``/v1/completions``, the
trained LoRA loaded into the server after every step (``/v1/load_lora_adapter``).

The server here is a small stand-in for vLLM on loopback: it samples from a real (tiny) model and
merges each adapter it is told to load as PEFT defines one (``adapter_config.json``'s ``r`` and
``lora_alpha``, ``base_model.model.<module>.lora_A/B.weight``: ``W + (alpha / r) B A``), read from
the files alone, so after a step its log-probabilities must equal the trainer's model's. Where
PEFT is installed, PEFT itself reads the adapter too; real vLLM does in ``tests/e2e``.
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import grpo  # noqa: E402
from tau_env.reference_trainers.checkpoint import load_checkpoint  # noqa: E402
from tau_env.reference_trainers.cpu_common import add_lora, lora_modules, save_peft_adapter  # noqa: E402

import tau_env  # noqa: E402
from tau_env.error import InfrastructureError, InvalidOptionError  # noqa: E402
from tau_env.sft import to_example  # noqa: E402

TASK = "travel_notice_simple"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama with a tokenizer trained on Harbor Bank episodes (``build_tiny_model``)."""
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    run = tau_env.evaluate("harbor-bank-v0", tau_env.OracleAgent, tau_env.ScriptedUser, task_ids=[TASK])
    corpus = [json.dumps(to_example(r.to_dict())) for r in run.results] * 3
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), corpus)


def _tok_model(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(path)), AutoTokenizer.from_pretrained(str(path))


#: A fault of MiniVLLM's completions that still answers 200: how it spoils the choice.
FAULTS = {
    "bad_id": lambda c: c["token_ids"].__setitem__(0, 10**6),
    "negative_id": lambda c: c["token_ids"].__setitem__(0, -3),
    "nan": lambda c: c["logprobs"]["token_logprobs"].__setitem__(0, float("nan")),
    "positive": lambda c: c["logprobs"]["token_logprobs"].__setitem__(0, 0.5),
    "null_logprobs": lambda c: c.__setitem__("logprobs", None),
    "wrong_len": lambda c: c["logprobs"]["token_logprobs"].append(-1.0),
}


def merge_adapter(base, path):
    """A copy of ``base`` with the PEFT LoRA adapter at ``path`` merged in, from the files alone."""
    from pathlib import Path

    from safetensors.torch import load_file

    config = json.loads((Path(path) / "adapter_config.json").read_text())
    tensors = load_file(str(Path(path) / "adapter_model.safetensors"))
    assert config["peft_type"] == "LORA" and not config["fan_in_fan_out"] and not config["use_rslora"]
    model = copy.deepcopy(base)
    scale = config["lora_alpha"] / config["r"]
    modules = {k.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for k in tensors}
    assert modules and all(m.rsplit(".", 1)[-1] in config["target_modules"] for m in modules)
    with torch.no_grad():
        for name in modules:
            a = tensors[f"base_model.model.{name}.lora_A.weight"]
            b = tensors[f"base_model.model.{name}.lora_B.weight"]
            assert a.shape[0] == b.shape[1] == config["r"]
            model.get_submodule(name).weight += scale * (b @ a)
    return model.eval()


class MiniVLLM:
    """``/v1/models``, ``/v1/completions`` (prompt as token ids; token ids and raw log-probabilities
    back) and runtime LoRA loading, over a real causal LM; ``lora`` False answers the adapter routes
    with 404, as vLLM without ``--enable-lora`` does, and a name loaded already gets vLLM's 400.
    ``faults``: what the next completions answer instead (one entry per request, see ``FAULTS``).
    """

    def __init__(self, model, name="base", lora=True):
        self.models = {name: model.eval()}
        self.base, self.name, self.lora = model, name, lora
        self.faults: list[str] = []
        self.requests: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, status, data):
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                outer.requests.append((self.path, {}))
                self._reply(200, {"data": [{"id": n} for n in outer.models]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                with outer.lock:
                    status, data = outer.handle(self.path, body)
                self._reply(status, data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def handle(self, path, body):
        if path.endswith("_lora_adapter") and not self.lora:
            return 404, {"detail": "Not Found"}
        if path == "/v1/load_lora_adapter":
            if body["lora_name"] in self.models:
                return 400, {"message": f"The lora adapter '{body['lora_name']}' has already been loaded."}
            self.models[body["lora_name"]] = merge_adapter(self.base, body["lora_path"])
            return 200, "ok"
        if path == "/v1/unload_lora_adapter":
            self.models.pop(body["lora_name"])
            return 200, "ok"
        if path == "/v1/completions":
            if body["model"] not in self.models:
                return 404, {"error": f"no model {body['model']}"}
            if self.faults:
                fault = self.faults.pop(0)
                if fault in ("500", "429"):
                    return int(fault), {"error": f"scripted {fault}"}
                reply = self.complete(self.models[body["model"]], body)
                FAULTS[fault](reply["choices"][0])
                return 200, reply
            return 200, self.complete(self.models[body["model"]], body)
        return 404, {}

    def complete(self, model, body):
        gen = torch.Generator().manual_seed(int(body.get("seed") or 0))
        ids, out, lps = list(body["prompt"]), [], []
        stop = set(body.get("stop_token_ids") or [])
        with torch.no_grad():
            for _ in range(int(body["max_tokens"])):
                logits = model(torch.tensor([ids])).logits[0, -1].float()
                probs = torch.softmax(logits / max(float(body["temperature"]), 1e-6), -1)
                tok = int(torch.multinomial(probs, 1, generator=gen))
                lps.append(float(torch.log_softmax(logits, -1)[tok]))  # raw: the model's own, temperature 1
                ids.append(tok)
                out.append(tok)
                if tok in stop:
                    break
        finish = "stop" if out and out[-1] in stop else "length"
        return {
            "choices": [{"text": "", "token_ids": out, "logprobs": {"token_logprobs": lps}, "finish_reason": finish}]
        }

    def logprobs(self, name, seq):
        with torch.no_grad():
            logits = self.models[name](torch.tensor([seq])).logits[0, :-1]
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(seq[1:]).unsqueeze(-1)).squeeze(-1)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("layers", [0, 1])
def test_peft_adapter_reproduces_the_trained_model(tiny_dir, tmp_path, layers):
    """All blocks, or only the top one (the blocks below get zero factors: every layer of a kind is there)."""
    model, tok = _tok_model(tiny_dir)
    base = copy.deepcopy(model)
    torch.manual_seed(0)
    add_lora(model, 4, 8.0, layers=layers)
    for m in lora_modules(model).values():
        torch.nn.init.normal_(m.lora_B, std=0.05)
    path = save_peft_adapter(model, tmp_path / "adapter", base_model=str(tiny_dir))
    config = json.loads((path / "adapter_config.json").read_text())
    from safetensors.torch import load_file

    factors = load_file(str(path / "adapter_model.safetensors"))
    assert len(factors) == 2 * 7 * 2  # A and B of the 7 projections of both blocks
    zero = [k for k, v in factors.items() if ".lora_B." in k and not v.abs().sum()]
    assert len(zero) == (7 if layers else 0) and all(".layers.0." in k for k in zero)
    assert config["r"] == 4 and config["lora_alpha"] == 8.0 and "q_proj" in config["target_modules"]
    ids = torch.tensor([tok.encode("<|im_start|>user\nhello there<|im_end|>")])
    readers = [merge_adapter(base, path)]
    try:
        import peft
    except ImportError:
        pass
    else:
        readers.append(peft.PeftModel.from_pretrained(copy.deepcopy(base), str(path)).merge_and_unload())
    with torch.no_grad():
        for merged in readers:
            torch.testing.assert_close(merged(ids).logits, model(ids).logits, atol=1e-5, rtol=1e-4)
        assert not torch.allclose(base(ids).logits, model(ids).logits, atol=1e-3)
    plain, _ = _tok_model(tiny_dir)
    with pytest.raises(InvalidOptionError, match="no LoRA"):
        save_peft_adapter(plain, tmp_path / "none")


def test_grpo_rolls_out_on_the_server_and_keeps_it_on_the_trained_weights(tiny_dir, tmp_path, mixed_group_rewards):
    base, _ = _tok_model(tiny_dir)
    server = MiniVLLM(base)
    out = tmp_path / "grpo"
    cfg = grpo.GRPOConfig(
        model=str(tiny_dir), out=str(out), task_ids=[TASK], steps=2, tasks_per_step=1, group_size=2,
        max_steps=4, max_new_tokens=6, lora_rank=4, lr=0.05, progress=False, rollout_server=server.url,
        mask_delta=10.0, is_cap=100.0, retrieval="none",
    )  # fmt: skip
    try:
        path = grpo.train(cfg)
        calls = [(p, b.get("model") or b.get("lora_name")) for p, b in server.requests if p != "/v1/models"]
        completions = [m for p, m in calls if p == "/v1/completions"]
        loads = [m for p, m in calls if p == "/v1/load_lora_adapter"]
        # step 1 rolls out on the served starting model, step 2 on the adapter loaded after step 1
        prefix = loads[0].removesuffix("-step-1")
        assert prefix.startswith("tau-grpo-") and loads == [f"{prefix}-step-1", f"{prefix}-step-2"]
        assert completions and completions[0] == "base" and completions[-1] == f"{prefix}-step-1"
        first_new = calls.index(("/v1/completions", f"{prefix}-step-1"))
        assert first_new > calls.index(("/v1/load_lora_adapter", f"{prefix}-step-1"))
        assert all(m == "base" for p, m in calls[:first_new] if p == "/v1/completions")
        assert ("/v1/unload_lora_adapter", f"{prefix}-step-1") in calls
        # the server's adapter is the trainer's model: the same log-probabilities
        trained = load_checkpoint(path).model.eval()
        rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
        seq = rollouts[-1]["input_ids"]
        with torch.no_grad():
            want = torch.log_softmax(trained(torch.tensor([seq])).logits[0, :-1], -1)
        want = want.gather(-1, torch.tensor(seq[1:]).unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(server.logprobs(f"{prefix}-step-2", seq), want, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(server.logprobs("base", seq), want, atol=1e-3)  # the weights did move
        # pi_rollout is what the server reported for the sampled tokens
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] is not None for r in rows)
        assert all(abs(r["is_weight_mean"] - 1.0) < 1e-3 for r in rows)  # server and trainer: one model
        assert sorted(p.name for p in (out / "adapters").iterdir()) == ["step-000001", "step-000002"]
        # resume to 3 steps against the same server (which still holds the first run's step-2 adapter: vLLM
        # refuses a name twice): the resumed LoRA is loaded under a new name before the first rollout, and
        # adapters a stopped run left past its checkpoint go
        (out / "adapters" / "step-000009").mkdir()
        server.requests.clear()
        grpo.train(grpo.GRPOConfig(**{**cfg.__dict__, "steps": 3}))
        first = [(p, b.get("model") or b.get("lora_name")) for p, b in server.requests if p != "/v1/models"][:2]
        again = first[0][1]
        assert again.endswith("-step-2") and again != f"{prefix}-step-2"
        assert first == [("/v1/load_lora_adapter", again), ("/v1/completions", again)]
        assert sorted(p.name for p in (out / "adapters").iterdir()) == ["step-000002", "step-000003"]
    finally:
        server.close()


def test_server_rollouts_need_lora_and_a_server_that_loads_adapters(tiny_dir, tmp_path, mixed_group_rewards):
    base, _ = _tok_model(tiny_dir)
    kw = dict(
        model=str(tiny_dir), task_ids=[TASK], steps=1, tasks_per_step=1, group_size=2, max_steps=4,
        max_new_tokens=4, progress=False, retrieval="none",
    )  # fmt: skip
    server = MiniVLLM(base, lora=False)
    try:
        with pytest.raises(InvalidOptionError, match="lora-rank"):
            grpo.train(grpo.GRPOConfig(**kw, out=str(tmp_path / "a"), lora_rank=0, rollout_server=server.url))
        with pytest.raises(InfrastructureError, match="enable-lora"):
            grpo.train(grpo.GRPOConfig(**kw, out=str(tmp_path / "b"), lora_rank=4, rollout_server=server.url))
    finally:
        server.close()
    with pytest.raises(InfrastructureError, match="127.0.0.1"):
        grpo.train(grpo.GRPOConfig(**kw, out=str(tmp_path / "c"), lora_rank=4, rollout_server=server.url))


def _server_cfg(tiny_dir, out, url, **kw):
    return grpo.GRPOConfig(
        **{
            **dict(
                model=str(tiny_dir), out=str(out), task_ids=[TASK], steps=1, tasks_per_step=1, group_size=2,
                max_steps=4, max_new_tokens=4, lora_rank=4, progress=False, rollout_server=url, retrieval="none",
                concurrency=1,
            ),
            **kw,
        }
    )  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("500", "HTTP 500"),
        ("bad_id", "outside the tokenizer's vocabulary"),
        ("negative_id", "outside the tokenizer's vocabulary"),
        ("nan", "log-probability nan"),
        ("positive", "log-probability 0.5"),
        ("null_logprobs", "without token ids and log-probabilities"),
        ("wrong_len", "without token ids and log-probabilities"),
    ],
)
def test_a_failing_server_stops_the_step_before_its_update(tiny_dir, tmp_path, fault, said):
    """Every episode failing on the server (after the harness's retries): one error with the server's
    message, before any update or checkpoint; once the server is fixed the same command runs."""
    base, _ = _tok_model(tiny_dir)
    server = MiniVLLM(base)
    server.faults = [fault] * 100
    out = tmp_path / "grpo"
    try:
        with pytest.raises(grpo.RolloutsFailed, match=f"step 1: 2 of 2 episodes failed.*{said}"):
            grpo.train(_server_cfg(tiny_dir, out, server.url))
        assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
        assert not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text().strip()
        server.faults = []
        grpo.train(_server_cfg(tiny_dir, out, server.url))
        [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert row["episodes"] == 2 and row["failed_episodes"] == 0
    finally:
        server.close()


def test_an_episode_that_failed_on_the_server_is_left_out_not_trained_as_a_failure(tiny_dir, tmp_path, caplog):
    """One episode of two fails (its three tries): it is left out of the step with a warning (not a
    reward-0 sample); at --max-failed-fraction 0 the same failure stops the run."""
    base, _ = _tok_model(tiny_dir)
    server = MiniVLLM(base)
    try:
        server.faults = ["500"] * 3
        out = tmp_path / "grpo"
        with caplog.at_level("WARNING", logger="tau_env.reference_trainers.grpo"):
            grpo.train(_server_cfg(tiny_dir, out, server.url))
        assert "1 of 2 episodes failed on infrastructure and are left out" in caplog.text
        assert "HTTP 500" in caplog.text
        [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert row["episodes"] == 1 and row["failed_episodes"] == 1
        rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
        assert len(rollouts) == 1 and rollouts[0]["info"]["termination_reason"] != "infrastructure_error"
        server.faults = ["500"] * 3
        with pytest.raises(grpo.RolloutsFailed, match="1 of 2 episodes failed"):
            grpo.train(_server_cfg(tiny_dir, tmp_path / "strict", server.url, max_failed_fraction=0.0))
    finally:
        server.close()


def test_a_busy_server_is_asked_again(tiny_dir, tmp_path, monkeypatch):
    from tau_env.reference_trainers import rollout_policy

    monkeypatch.setattr(rollout_policy, "BUSY_WAITS", (0.01, 0.01, 0.01))
    base, _ = _tok_model(tiny_dir)
    server = MiniVLLM(base)
    server.faults = ["429", "429"]
    out = tmp_path / "grpo"
    try:
        grpo.train(_server_cfg(tiny_dir, out, server.url))
        [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert row["episodes"] == 2 and row["failed_episodes"] == 0
    finally:
        server.close()


def test_no_resume_asks_the_server_before_deleting_the_run(tiny_dir, tmp_path):
    base, _ = _tok_model(tiny_dir)
    server = MiniVLLM(base)
    out = tmp_path / "grpo"
    try:
        grpo.train(_server_cfg(tiny_dir, out, server.url))
    finally:
        server.close()
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    for named in ("", "base"):  # the server is gone: asked even when --rollout-model names the model
        with pytest.raises(InfrastructureError, match="127.0.0.1"):
            grpo.train(_server_cfg(tiny_dir, out, server.url, resume=False, rollout_model=named))
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_rollout_model_the_server_does_not_serve_is_said_first(tiny_dir, tmp_path):
    base, _ = _tok_model(tiny_dir)
    server = MiniVLLM(base)
    try:
        with pytest.raises(InfrastructureError, match="serves base, not --rollout-model 'Base'"):
            grpo.train(_server_cfg(tiny_dir, tmp_path / "g", server.url, rollout_model="Base"))
        assert [p for p, _ in server.requests] == ["/v1/models"]  # nothing played
    finally:
        server.close()
