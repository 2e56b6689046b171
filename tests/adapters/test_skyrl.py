"""SkyRL: tau_env episodes behind the real skyrl_gym's text ``init`` / ``step``, made by name through
``skyrl_gym.make``; the oracle played as model text scores as the env played directly; garbage gets 0.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

skyrl_gym = pytest.importorskip("skyrl_gym")

from tau_env.adapters import skyrl as sky  # noqa: E402
from tau_env.adapters.errors import AdapterError  # noqa: E402

import tau_env  # noqa: E402
from tau_env import OracleAgent, ScriptedUser, TauEnv, run_episode  # noqa: E402
from tau_env.error import EpisodeOverError, InvalidOptionError, ResetNeeded  # noqa: E402
from tau_env.testing import FakeOpenAI, own_turns, seat_of, text  # noqa: E402
from tests.conftest import TAU3_DATA, make_domain, needs_tau3_data  # noqa: E402


def play_oracle(env, seed):
    """Init, then step the oracle's actions written as model text; return the steps' outputs."""
    chat, info = env.init([{"role": "user", "content": "ignored"}])
    agent = OracleAgent()
    agent.reset(task=env.gym.env.task, seed=seed)
    outs = []
    while not outs or not outs[-1]["done"]:
        outs.append(env.step(sky.action_text(agent(env.observation))))
    return chat, info, outs


@pytest.mark.parametrize("task_id", ["travel_notice_simple", "lost_card_standard_shipping", "open_cd_minimum"])
def test_oracle_as_text_through_skyrl_make_scores_as_the_env(task_id):
    env = skyrl_gym.make("tau_env-harbor-bank-v0", env_config={}, extras={"task_id": task_id, "seed": 3})
    assert isinstance(env, skyrl_gym.Env) and env.spec.id == "tau_env-harbor-bank-v0"
    chat, info, outs = play_oracle(env, seed=3)
    direct_env = tau_env.make("harbor-bank-v0")
    direct = run_episode(direct_env, OracleAgent(), ScriptedUser(), task_id, seed=3)
    assert outs[-1]["reward"] == direct.reward == 1.0
    assert all(o["reward"] == 0.0 and not o["done"] for o in outs[:-1])
    assert env.gym.env.db_digest() == direct_env.db_digest()
    assert outs[-1]["metadata"]["termination_reason"] == direct.termination_reason
    assert env.get_metrics() == {"tau_env_reward": 1.0, "turns": len(outs)}
    # the same conversation, up to the tool-call ids that the text parser assigns
    ours = [(e["seat"], e["message"].get("content")) for e in env.gym.env.trajectory]
    theirs = [(e["seat"], e["message"].get("content")) for e in direct.events]
    assert ours == theirs
    env.close()


def test_init_and_observations_are_what_the_model_sees():
    env = skyrl_gym.make("tau_env-harbor-bank-v0", env_config={}, extras={"task_id": "travel_notice_simple"})
    chat, info = env.init([])
    assert (
        chat[0]["role"] == "system"
        and "<tools>" in chat[0]["content"]
        and '"name": "unlock_tool"' in chat[0]["content"]
    )
    assert chat[-1]["role"] == "user" and "Japan" in chat[-1]["content"]
    assert info["task_id"] == "travel_notice_simple" and {t["function"]["name"] for t in info["tools"]} >= {
        "unlock_tool"
    }
    out = env.step('Let me look.\n<tool_call>\n{"name": "get_current_time", "arguments": {}}\n</tool_call>')
    assert [m["role"] for m in out["observations"]] == ["tool"]
    assert out["observations"][0]["name"] == "get_current_time"
    assert out["metadata"]["parsed_action"]["content"] == "Let me look."
    out = env.step("Could you tell me your full name and date of birth?")
    assert [m["role"] for m in out["observations"]] == ["user"] and not out["done"]
    env.close()


def test_tools_in_prompt_off_leaves_the_system_prompt_as_tau_env_wrote_it():
    env = sky.TauSkyRLEnv({"tools_in_prompt": False}, {"task_id": "travel_notice_simple"})
    chat, info = env.init([])
    assert chat == env.observation["messages"] and "<tools>" not in chat[0]["content"]
    assert info["tools"] == env.observation["tools"]


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "asdf " * 50,
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"name": "drop_table", "arguments": 1}</tool_call>',
    ],
)
def test_garbage_gets_zero_and_never_raises(garbage):
    env = skyrl_gym.make("tau_env-harbor-bank-v0", env_config={"max_steps": 20}, extras={"task_id": "open_cd_minimum"})
    env.init([])
    start = env.gym.env.db_digest()
    out = {"done": False}
    while not out["done"]:
        out = env.step(garbage)
    assert out["reward"] == 0.0 and env.get_metrics()["tau_env_reward"] == 0.0
    assert env.gym.env.db_digest() == start
    with pytest.raises(EpisodeOverError):
        env.step("more")


def test_max_turns_ends_the_episode_truncated_with_zero():
    env = skyrl_gym.make(
        "tau_env-harbor-bank-v0", env_config={}, extras={"task_id": "travel_notice_simple", "max_turns": 2}
    )
    env.init([])
    assert not env.step('<tool_call>{"name": "get_current_time", "arguments": {}}</tool_call>')["done"]
    out = env.step('<tool_call>{"name": "get_current_time", "arguments": {}}</tool_call>')
    assert out["done"] and out["reward"] == 0.0 and out["metadata"]["termination_reason"] == "max_turns"
    assert env.gym.env.truncations["agent"]


def test_handover_task_user_tools_run_inside():
    env = sky.TauSkyRLEnv(extras={"task_id": "confirm", "seed": 0}, env=TauEnv(make_domain()))
    _, _, outs = play_oracle(env, seed=0)
    assert outs[-1]["reward"] == 1.0
    assert any(ev["seat"] == "user" and ev.get("tool_results") for ev in env.gym.env.trajectory)


def user_script(req):
    assert seat_of(req) == "user"
    return text("Please restock the widget.") if own_turns(req) == 0 else text("Thanks! ###STOP###")


def test_llm_user_from_env_config_and_a_user_object():
    with FakeOpenAI(user_script) as server:
        with tau_env.registry.scoped():
            tau_env.register("tiny-sky-v0", make_domain)
            assert sky.register_envs() == ["tau_env-tiny-sky-v0"]
            cfg = {"user": {"model": "u", "base_url": server.url}}
            env = skyrl_gym.make("tau_env-tiny-sky-v0", env_config=cfg, extras={"task_id": "restock", "seed": 5})
            chat, _ = env.init([])
            assert chat[-1]["content"] == "Please restock the widget."
            env.step(
                '<tool_call>{"name": "unlock_tool", "arguments": {"tool_name": "secret_restock_1234"}}</tool_call>'
            )
            env.step('<tool_call>{"name": "secret_restock_1234", "arguments": {"item_id": "widget"}}</tool_call>')
            out = env.step("Done!")
        skyrl_gym.envs.registration.deregister("tau_env-tiny-sky-v0")
    assert (out["reward"], out["done"], out["metadata"]["termination_reason"]) == (1.0, True, "user_stop")
    assert len(server.requests) == 2
    assert isinstance(sky.user_policy(ScriptedUser()), ScriptedUser)


def test_omegaconf_env_config_and_bad_settings():
    from omegaconf import OmegaConf

    env = skyrl_gym.make("tau_env-harbor-bank-v0", env_config=OmegaConf.create({"max_steps": 7}), extras={})
    assert env.gym.env.max_steps == 7
    with pytest.raises(ResetNeeded):
        env.step("hi")
    with pytest.raises(tau_env.error.InvalidActionError):
        env.init([]) and env.step({"role": "assistant"})
    with pytest.raises(InvalidOptionError):
        sky.user_policy("gpt-4")
    with pytest.raises(InvalidOptionError):
        sky.user_policy({"base_url": "http://127.0.0.1:1/v1"})
    with pytest.raises(InvalidOptionError):
        sky.TauSkyRLEnv({}, {"max_turns": 0})


def test_registered_ids_and_dataset_rows():
    assert {f"tau_env-{i}" for i in tau_env.registry.ids()} <= set(skyrl_gym.registry)
    assert sky.register_envs() == []  # idempotent
    rows = sky.dataset_rows("harbor-bank-v0", ["travel_notice_simple"])
    assert rows == [
        {
            "data_source": "tau_env/harbor-bank-v0",
            "prompt": [{"role": "user", "content": "travel_notice_simple"}],
            "env_class": "tau_env-harbor-bank-v0",
            "task_id": "travel_notice_simple",
        }
    ]
    assert len(sky.dataset_rows()) == len(tau_env.make("harbor-bank-v0").task_pool)


def test_missing_skyrl_gym_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "skyrl_gym", None)
    spec = importlib.util.spec_from_file_location("_sky_copy", Path(sky.__file__))
    with pytest.raises(AdapterError, match=r"pip install 'tau-env\[skyrl\]'"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


@needs_tau3_data
def test_tau3_banking_by_name_with_data_dir():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pack's note about the simulator prompt
        env = skyrl_gym.make("tau_env-tau3-banking", env_config={"data_dir": str(TAU3_DATA)}, extras={})
        direct_env = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA))
    task_id = env.gym.env.domain.tasks[0].id
    env.extras.update(task_id=task_id, seed=1)
    _, _, outs = play_oracle(env, seed=1)
    direct = run_episode(direct_env, OracleAgent(), ScriptedUser(), task_id, seed=1)
    assert outs[-1]["reward"] == direct.reward
    assert env.gym.env.db_digest() == direct_env.db_digest()
