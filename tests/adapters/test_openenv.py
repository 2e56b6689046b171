"""tau-env serve: the real openenv-core client against the server, the reward the env gives, and each
security point (token, loopback, limits, idle reaping, isolation, JSON errors) with a test that fails
without it.
"""

from __future__ import annotations

import asyncio
import hmac
import json

import pytest
from tau_env.adapters.errors import AdapterError

import tau_env
from tau_env import OracleAgent, ScriptedUser, TauEnv, run_episode, say
from tests.conftest import make_domain

pytest.importorskip("fastapi")
pytest.importorskip("openenv.core")

from starlette.testclient import TestClient  # noqa: E402
from tau_env.adapters.openenv import (  # noqa: E402
    SESSION_HEADER,
    BackgroundServer,
    ServeLimits,
    check_bind,
    create_app,
    is_loopback,
    load_token,
)
from tau_env.adapters.openenv_client import TauEnvClient  # noqa: E402

TOKEN = "s3cret-token-for-tests-0123456789"
WS = "ws://127.0.0.1/ws"  # Starlette's test client otherwise says Host: testserver, refused without a token


def local(app, **kwargs):
    """Starlette's test client as a local, non-browser client: Host 127.0.0.1, JSON bodies."""
    return TestClient(app, base_url="http://127.0.0.1", headers={"content-type": "application/json"}, **kwargs)


@pytest.fixture
def tiny_id():
    with tau_env.registry.scoped():
        tau_env.register("tiny-serve-v0", make_domain)
        yield "tiny-serve-v0"


async def play_oracle(url, task_id, seed=3, token=None):
    agent = OracleAgent()
    agent.reset(task=tau_env.make("harbor-bank-v0").domain.task(task_id))
    async with TauEnvClient(url, token=token) as client:
        result = await client.reset(task_id=task_id, seed=seed)
        while not result.done:
            result = await client.step(agent(result.observation))
        return result, await client.state()


def direct(task_id, seed=3, env_id="harbor-bank-v0"):
    env = tau_env.make(env_id)
    r = run_episode(env, OracleAgent(), ScriptedUser(), task_id, seed=seed)
    return r, env.db_digest()


# --- the protocol, with the real client ------------------------------------------------------------
@pytest.mark.parametrize("task_id", ["travel_notice_simple", "lost_card_standard_shipping"])
def test_openenv_client_plays_the_oracle_to_the_envs_reward(task_id):
    with BackgroundServer(create_app("harbor-bank-v0")) as url:
        result, state = asyncio.run(play_oracle(url, task_id))
    expected, digest = direct(task_id)
    assert result.reward == expected.reward == 1.0
    assert state["db_digest"] == digest and state["step_count"] == expected.steps
    assert state["termination_reason"] == expected.termination_reason


def test_a_failing_agent_gets_zero_over_the_wire_too():
    async def noop(url):
        async with TauEnvClient(url) as client:
            r = await client.reset(task_id="travel_notice_simple", seed=0)
            while not r.done:
                r = await client.step(say("I'm sorry, I can't help with that today."))
            return r, await client.state()

    with BackgroundServer(create_app("harbor-bank-v0")) as url:
        r, state = asyncio.run(noop(url))
    expected = run_episode(tau_env.make("harbor-bank-v0"), tau_env.NoopAgent(), ScriptedUser(), "travel_notice_simple")
    assert r.reward == expected.reward == 0.0 and state["termination_reason"] == expected.termination_reason


def test_sync_wrapper_and_http_routes_share_the_protocol(tiny_id):
    with BackgroundServer(create_app(tiny_id)) as url:
        with TauEnvClient(url).sync() as client:
            r = client.reset(task_id="restock", seed=0)
            assert r.observation["messages"][-1]["content"] == "Please restock the widget."
            r = client.step(tau_env.call("unlock_tool", tool_name="secret_restock_1234"))
            assert not r.done and r.reward == 0.0
    with local(create_app(tiny_id)) as http:
        r = http.post("/reset", json={"task_id": "restock", "seed": 0})
        sid = r.headers[SESSION_HEADER]
        assert r.status_code == 200 and r.json()["observation"]["session_id"] == sid
        for action in (
            tau_env.call("unlock_tool", tool_name="secret_restock_1234"),
            tau_env.call("secret_restock_1234", item_id="widget"),
            say("Done."),
        ):
            r = http.post("/step", json={"action": action}, headers={SESSION_HEADER: sid})
        assert r.json()["done"] is True and r.json()["reward"] == 1.0
        assert http.get("/state", headers={SESSION_HEADER: sid}).json()["reward"] == 1.0
        assert http.get("/health").json()["status"] == "healthy"
        assert set(http.get("/schema").json()) == {"action", "observation", "state"}
        assert http.post("/close", headers={SESSION_HEADER: sid}).json()["closed"] is True
        assert http.get("/state", headers={SESSION_HEADER: sid}).status_code == 404


# --- security: token and binding ---------------------------------------------------------------------
def test_non_loopback_bind_needs_a_token():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org") and not is_loopback("10.0.0.1")
    with pytest.raises(AdapterError, match="needs a token"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", TOKEN)
    check_bind("127.0.0.1", None)


def test_token_comes_from_the_environment_or_a_file(tmp_path):
    assert load_token(environ={}) is None
    assert load_token(environ={"TAU_ENV_SERVE_TOKEN": TOKEN}) == TOKEN
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    assert load_token(f, environ={}) == TOKEN
    with pytest.raises(AdapterError, match="at least 16"):
        load_token(environ={"TAU_ENV_SERVE_TOKEN": "short"})
    with pytest.raises(AdapterError, match="Cannot read"):
        load_token(tmp_path / "missing", environ={})


def test_every_route_needs_the_token(tiny_id):
    with local(create_app(tiny_id, token=TOKEN)) as http:
        for method, path in [("post", "/reset"), ("post", "/step"), ("get", "/state"), ("get", "/health")]:
            for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": TOKEN}):
                r = getattr(http, method)(path, headers=headers)
                assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        ok = http.post("/reset", json={"task_id": "restock"}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200


def test_websocket_needs_the_token(tiny_id):
    with BackgroundServer(create_app("harbor-bank-v0", token=TOKEN)) as url:
        for token in (None, "wrong-token-0123456789"):
            with pytest.raises(ConnectionError):
                asyncio.run(play_oracle(url, "travel_notice_simple", token=token))
        result, _ = asyncio.run(play_oracle(url, "travel_notice_simple", token=TOKEN))
    assert result.reward == 1.0


def test_token_is_compared_in_constant_time(tiny_id, monkeypatch):
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    with local(create_app(tiny_id, token=TOKEN)) as http:
        http.get("/health", headers={"Authorization": "Bearer nope-nope-nope-nope"})
    assert calls and calls[0][1] == TOKEN.encode()


# --- security: limits ------------------------------------------------------------------------------------
def test_request_body_limit(tiny_id):
    with local(create_app(tiny_id, limits=ServeLimits(max_request_bytes=2000))) as http:
        sid = http.post("/reset", json={"task_id": "restock"}).headers[SESSION_HEADER]
        before = http.get("/state", headers={SESSION_HEADER: sid}).json()
        r = http.post("/step", json={"action": say("x" * 5000)}, headers={SESSION_HEADER: sid})
        assert r.status_code == 413 and r.json()["error"] == "request_too_large"
        assert http.get("/state", headers={SESSION_HEADER: sid}).json() == before
        assert http.post("/step", json={"action": say("x" * 500)}, headers={SESSION_HEADER: sid}).status_code == 200


def test_websocket_message_limit(tiny_id):
    with local(create_app(tiny_id, limits=ServeLimits(max_message_bytes=2000))) as http:
        with http.websocket_connect(WS) as ws:
            ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "restock"}}))
            assert ws.receive_json()["type"] == "observation"
            ws.send_text(json.dumps({"type": "step", "data": say("x" * 5000)}))
            answer = ws.receive_json()
            assert answer["type"] == "error" and answer["data"]["code"] == "message_too_large"
            assert ws.receive()["code"] == 1009


def test_tool_calls_per_step_limit(tiny_id):
    with local(create_app(tiny_id, limits=ServeLimits(max_tool_calls=3))) as http:
        sid = http.post("/reset", json={"task_id": "confirm"}).headers[SESSION_HEADER]
        before = http.get("/state", headers={SESSION_HEADER: sid}).json()
        calls = [tau_env.tool_call("add_stock", {"item_id": "gadget", "qty": 1}, id=f"c{i}") for i in range(4)]
        action = tau_env.assistant_message(None, calls)
        r = http.post("/step", json={"action": action}, headers={SESSION_HEADER: sid})
        assert r.status_code == 422 and r.json()["error"] == "too_many_tool_calls"
        after = http.get("/state", headers={SESSION_HEADER: sid}).json()
        assert after == before  # nothing ran
        action["tool_calls"] = calls[:3]
        assert http.post("/step", json={"action": action}, headers={SESSION_HEADER: sid}).status_code == 200


def test_session_limit(tiny_id):
    with local(create_app(tiny_id, limits=ServeLimits(max_sessions=2))) as http:
        sids = [http.post("/reset", json={}).headers[SESSION_HEADER] for _ in range(2)]
        r = http.post("/reset", json={})
        assert r.status_code == 503 and r.json()["error"] == "capacity_reached"
        with http.websocket_connect(WS) as ws:
            assert ws.receive_json()["data"]["code"] == "capacity_reached"
        http.post("/close", headers={SESSION_HEADER: sids[0]})
        assert http.post("/reset", json={}).status_code == 200


def test_idle_sessions_are_reaped(tiny_id):
    app = create_app(tiny_id, limits=ServeLimits(idle_timeout_s=60))
    with local(app) as http:
        old = http.post("/reset", json={}).headers[SESSION_HEADER]
        fresh = http.post("/reset", json={}).headers[SESSION_HEADER]
        sessions = app.sessions
        sessions.live[old].last_used -= 120  # idle for two minutes
        assert sessions.reap() == [old]
        assert http.get("/state", headers={SESSION_HEADER: old}).status_code == 404
        assert http.get("/state", headers={SESSION_HEADER: fresh}).status_code == 200


def test_the_reaper_runs_by_itself(tiny_id):
    app = create_app(tiny_id, limits=ServeLimits(idle_timeout_s=0.05, reap_interval_s=0.01))
    with local(app) as http:
        http.post("/reset", json={})
        for _ in range(500):  # polls: no wall-clock assertion, only that it happens
            if not app.sessions.live:
                break
            asyncio.run(asyncio.sleep(0.01))
        assert not app.sessions.live


# --- security: isolation and errors --------------------------------------------------------------------
def test_sessions_never_share_a_database(tiny_id):
    with local(create_app(tiny_id)) as http:
        a = http.post("/reset", json={"task_id": "confirm"}).headers[SESSION_HEADER]
        b = http.post("/reset", json={"task_id": "confirm"}).headers[SESSION_HEADER]
        before_b = http.get("/state", headers={SESSION_HEADER: b}).json()["db_digest"]
        http.post(
            "/step", json={"action": tau_env.call("add_stock", item_id="gadget", qty=5)}, headers={SESSION_HEADER: a}
        )
        assert http.get("/state", headers={SESSION_HEADER: a}).json()["db_digest"] != before_b
        assert http.get("/state", headers={SESSION_HEADER: b}).json()["db_digest"] == before_b
        for sid in ("", "x" * 100, a[:-1]):  # not a live session: refused, nothing touched
            r = http.post("/step", json={"action": say("hi")}, headers={SESSION_HEADER: sid})
            assert r.status_code == 404 and r.json()["error"] == "unknown_session"


def test_session_ids_are_unguessable(tiny_id):
    app = create_app(tiny_id)
    with local(app) as http:
        sids = {http.post("/reset", json={}).headers[SESSION_HEADER] for _ in range(20)}
    assert len(sids) == 20 and all(len(s) >= 32 for s in sids)


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("post", "/reset", b"{not json", 400),
        ("post", "/reset", b"[1, 2]", 422),
        ("post", "/reset", b'{"seed": -1}', 422),
        ("post", "/reset", b'{"task_id": "no-such-task"}', 404),
        ("post", "/reset", b'{"task_index": 999}', 400),
        ("post", "/reset", b'{"unknown": 1}', 422),
        ("post", "/step", b'{"action": "hello"}', 422),
        ("post", "/step", b"[" * 100_000, 400),
        ("get", "/nope", None, 404),
        ("delete", "/reset", None, 405),
    ],
)
def test_malformed_requests_get_json_4xx(tiny_id, method, path, body, status):
    with local(create_app(tiny_id), raise_server_exceptions=True) as http:
        r = http.request(method.upper(), path, content=body)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json" and "message" in r.json()
    assert "Traceback" not in r.text


def test_a_bug_answers_500_json_without_a_traceback(tiny_id, monkeypatch):
    from tau_env.adapters.openenv import Session

    def broken(self):
        raise RuntimeError("secret internals /etc/passwd")

    monkeypatch.setattr(Session, "state", broken)
    with local(create_app(tiny_id), raise_server_exceptions=False) as http:
        sid = http.post("/reset", json={}).headers[SESSION_HEADER]
        r = http.get("/state", headers={SESSION_HEADER: sid})
    assert r.status_code == 500 and r.json()["error"] == "internal_error"
    assert "secret" not in r.text and "Traceback" not in r.text


def test_an_llm_user_plays_inside_the_server(tiny_id):
    from tau_env.llm import ChatClient, LLMUser
    from tau_env.testing import FakeOpenAI, own_turns, text

    def script(req):
        return text("Please restock the widget.") if own_turns(req) == 0 else text("Thanks! ###STOP###")

    with FakeOpenAI(script) as server:
        app = create_app(tiny_id, user=LLMUser(ChatClient("u", server.url, backoff=0.01)))
        with local(app) as http:
            r = http.post("/reset", json={"task_id": "restock"})
            sid = r.headers[SESSION_HEADER]
            assert r.json()["observation"]["messages"][-1]["content"] == "Please restock the widget."
            http.post(
                "/step",
                json={"action": tau_env.call("unlock_tool", tool_name="secret_restock_1234")},
                headers={SESSION_HEADER: sid},
            )
            http.post(
                "/step",
                json={"action": tau_env.call("secret_restock_1234", item_id="widget")},
                headers={SESSION_HEADER: sid},
            )
            r = http.post("/step", json={"action": say("Done.")}, headers={SESSION_HEADER: sid})
    assert r.json()["done"] and r.json()["reward"] == 1.0
    expected = TauEnv(make_domain())
    run_episode(expected, OracleAgent(), ScriptedUser(), "restock")
    assert expected.episode_reward == 1.0


# --- the command line ------------------------------------------------------------------------------
def serve_parser():
    from tau_env.adapters.serve_cli import add_parser

    from tau_env.cli import Parser

    root = Parser(prog="tau-env")
    add_parser(root.add_subparsers(dest="command", parser_class=Parser))
    return root


def test_cli_defaults_to_loopback_and_has_no_token_flag(capsys):
    from tau_env.adapters.serve_cli import options

    args = serve_parser().parse_args(["serve", "harbor-bank-v0"])
    assert args.host == "127.0.0.1"
    with pytest.raises(SystemExit):
        serve_parser().parse_args(["serve", "harbor-bank-v0", "--token", TOKEN])
    args = serve_parser().parse_args(["serve", "harbor-bank-v0", "--host", "0.0.0.0", "--max-sessions", "3"])
    with pytest.raises(AdapterError, match="needs a token"):
        options(args)


def test_cli_reads_the_token_from_the_environment(monkeypatch, tmp_path):
    from tau_env.adapters.serve_cli import options

    monkeypatch.setenv("TAU_ENV_SERVE_TOKEN", TOKEN)
    args = serve_parser().parse_args(["serve", "harbor-bank-v0", "--host", "0.0.0.0", "--max-tool-calls", "4"])
    kw = options(args)
    assert kw["token"] == TOKEN and kw["limits"].max_tool_calls == 4
    f = tmp_path / "tok"
    f.write_text("another-token-0123456789")
    args = serve_parser().parse_args(["serve", "harbor-bank-v0", "--token-file", str(f)])
    assert options(args)["token"] == "another-token-0123456789"


# --- limits on a session's size, strict inputs, the token file -------------------------------------------
def big_call(i):
    """A tool call of some 1.5 kB (it keeps the turn with the agent; each one differs, no loop rule)."""
    return tau_env.call("get_item", item_id=f"{i}-" + "y" * 1500)


def test_a_session_past_its_byte_budget_gets_413_and_is_closed(tiny_id):
    with local(create_app(tiny_id, limits=ServeLimits(max_session_bytes=6000))) as http:
        sid = http.post("/reset", json={"task_id": "restock"}).headers[SESSION_HEADER]
        sizes = []
        for i in range(10):
            r = http.post("/step", json={"action": big_call(i)}, headers={SESSION_HEADER: sid})
            if r.status_code != 200:
                break
            sizes.append(len(r.content))
        assert r.status_code == 413 and r.json()["error"] == "session_too_large"
        assert sizes and max(sizes) < 6000 + 4000  # every reply within the budget (plus the tool list)
        assert http.get("/state", headers={SESSION_HEADER: sid}).status_code == 404  # closed
        big = http.post("/reset", json={"task_id": "restock"}).headers[SESSION_HEADER]
        r = http.post("/step", json={"action": say("z" * 7000)}, headers={SESSION_HEADER: big})
        assert r.status_code == 413 and not http.app.sessions.live  # refused before it ran, closed too


def test_a_websocket_session_past_its_byte_budget_is_closed(tiny_id):
    with local(create_app(tiny_id, limits=ServeLimits(max_session_bytes=6000))) as http:
        with http.websocket_connect(WS) as ws:
            ws.send_text(json.dumps({"type": "reset", "data": {"task_id": "restock"}}))
            assert ws.receive_json()["type"] == "observation"
            for i in range(10):
                ws.send_text(json.dumps({"type": "step", "data": big_call(i)}))
                answer = ws.receive_json()
                if answer["type"] == "error":
                    break
            assert answer["data"]["code"] == "session_too_large" and answer["data"]["status"] == 413
            assert ws.receive()["code"] == 1009
        assert not http.app.sessions.live


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/reset", {"seed": True}, "seed"),
        ("/reset", {"seed": 1.0}, "seed"),
        ("/reset", {"seed": "1"}, "seed"),
        ("/reset", {"task_index": False}, "task_index"),
        ("/step", {"action": {"content": "hi"}, "timeout_s": 5}, "timeout_s"),
    ],
)
def test_strict_inputs(tiny_id, path, body, field):
    with local(create_app(tiny_id)) as http:
        sid = http.post("/reset", json={"task_id": "restock"}).headers[SESSION_HEADER]
        r = http.post(path, json=body, headers={SESSION_HEADER: sid})
        assert r.status_code == 422 and field in r.json()["message"]
        ok = http.post("/step", json={"action": {"content": "hi"}, "timeout_s": None}, headers={SESSION_HEADER: sid})
        assert ok.status_code == 200


def test_the_token_file_is_its_first_line(tmp_path):
    f = tmp_path / "token"
    f.write_text("a" * 32 + "\nsecond line\n")
    assert load_token(f, environ={}) == "a" * 32
    f.write_text("\n" + "a" * 32 + "\n")
    with pytest.raises(AdapterError, match="empty first line"):
        load_token(f, environ={})
    f.write_text("two words but long enough\n")
    with pytest.raises(AdapterError, match="printable ASCII"):
        load_token(f, environ={})


def test_cli_refuses_a_token_on_the_command_line_without_repeating_it(capsys):
    from tau_env.cli import main

    for argv in (["--token", TOKEN], [f"--token={TOKEN}"]):
        with pytest.raises(SystemExit) as e:
            main(["serve", "harbor-bank-v0", *argv])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert TOKEN not in err and "TAU_ENV_SERVE_TOKEN" in err and "--token-file" in err


def test_cli_checks_the_extra_before_its_banner(monkeypatch, capsys):
    from tau_env.cli import main

    monkeypatch.setitem(__import__("sys").modules, "uvicorn", None)  # as if the extra were missing
    assert main(["serve", "harbor-bank-v0", "--port", "1"]) == 2
    out = capsys.readouterr()
    assert "http://" not in out.out + out.err and "tau-env[openenv]" in out.err


def test_cli_connection_limits_reach_the_server(monkeypatch):
    from tau_env.adapters.serve_cli import options

    flags = ["--max-connections", "7", "--header-timeout", "2", "--body-timeout", "3", "--keep-alive-timeout", "4"]
    args = serve_parser().parse_args(["serve", "harbor-bank-v0", *flags, "--max-session-bytes", "9999"])
    limits = options(args)["limits"]
    assert (limits.max_connections, limits.header_timeout_s, limits.body_timeout_s) == (7, 2.0, 3.0)
    assert (limits.keep_alive_timeout_s, limits.max_session_bytes) == (4.0, 9999)
    with pytest.raises(SystemExit):
        serve_parser().parse_args(["serve", "harbor-bank-v0", "--header-timeout", "0"])


def test_missing_extra_messages_say_when_python_is_the_cause():
    from tau_env.adapters.errors import require

    with pytest.raises(AdapterError, match=r"needs Python >= 99\.0; this is Python 3\.\d+, where pip install"):
        require("no_such_framework_xyz", "nemo-gym", "the NeMo Gym adapter", min_python=(99, 0))
    with pytest.raises(AdapterError, match=r"install it with: pip install 'tau-env\[nemo-gym\]'") as e:
        require("no_such_framework_xyz", "nemo-gym", "the NeMo Gym adapter", min_python=(3, 0))
    assert "Python >=" not in str(e.value)
