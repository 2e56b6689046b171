"""The Gymnasium single-agent view: Gymnasium's own checker, registered ids, the user policies inside
(scripted, LLM from sync and async code, cached), and the same reward and final database as the env.
"""

from __future__ import annotations

import asyncio
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env
from tau_env.adapters.gym import TauGymEnv, register_envs

import tau_env
from tau_env import NoopAgent, OracleAgent, ScriptedUser, TauEnv, run_episode, say
from tau_env.error import EpisodeOverError, InvalidActionError, InvalidOptionError
from tau_env.llm import ChatClient, LLMUser, ResponseCache
from tau_env.testing import FakeOpenAI, own_turns, seat_of, text
from tests.conftest import TAU3_DATA, make_domain, needs_tau3_data


def play(gym_env, agent, task_id, seed=0):
    """Drive the gym env with a tau_env agent policy; return the last reward and the wrapped env."""
    obs, info = gym_env.reset(seed=seed, options={"task_id": task_id})
    agent.reset(task=gym_env.unwrapped.env.task, seed=seed)
    assert info["task_id"] == task_id
    reward, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = gym_env.step(agent(obs))
        done = terminated or truncated
        assert obs in gym_env.observation_space
    return reward, info, gym_env.unwrapped.env


def test_check_env_passes_on_the_raw_env_and_through_make():
    env = gymnasium.make("tau_env/harbor-bank-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any checker warning about our env fails the test
        check_env(env.unwrapped)  # with a spec: also makes the env in each render mode and closes twice
    env.close()
    check_env(TauGymEnv("harbor-bank-v0", render_mode="ansi"))


def test_every_tau_env_id_is_registered_and_the_module_form_works():
    ids = [f"tau_env/{i}" for i in tau_env.registry.ids()]
    assert all(i in gymnasium.registry for i in ids)
    assert register_envs() == []  # idempotent
    env = gymnasium.make("tau_env.adapters.gym:tau_env/harbor-bank-v0", max_steps=7)
    assert env.unwrapped.env.max_steps == 7
    env.close()


def test_user_registered_ids_join_on_request():
    with tau_env.registry.scoped():
        tau_env.register("tiny-gym-v0", make_domain)
        assert register_envs() == ["tau_env/tiny-gym-v0"]
        env = gymnasium.make("tau_env/tiny-gym-v0")
        obs, _ = env.reset(options={"task_id": "restock"})
        assert obs["messages"][-1] == {"role": "user", "content": "Please restock the widget."}
        env.close()
    del gymnasium.registry["tau_env/tiny-gym-v0"]


@pytest.mark.parametrize("task_id", ["travel_notice_simple", "lost_card_standard_shipping", "open_cd_minimum"])
def test_oracle_through_the_gym_env_scores_as_the_env_does(task_id):
    gym_env = gymnasium.make("tau_env/harbor-bank-v0")
    reward, info, inner = play(gym_env, OracleAgent(), task_id, seed=3)
    direct_env = tau_env.make("harbor-bank-v0")
    direct = run_episode(direct_env, OracleAgent(), ScriptedUser(), task_id, seed=3)
    assert reward == direct.reward == 1.0
    assert info["termination_reason"] == direct.termination_reason
    assert inner.db_digest() == direct_env.db_digest()
    assert inner.trajectory == direct.events  # the very same conversation
    gym_env.close()


def test_a_failing_agent_gets_the_envs_zero():
    gym_env = TauGymEnv("harbor-bank-v0")
    reward, info, inner = play(gym_env, NoopAgent(), "travel_notice_simple")
    direct_env = tau_env.make("harbor-bank-v0")
    direct = run_episode(direct_env, NoopAgent(), ScriptedUser(), "travel_notice_simple", seed=0)
    assert reward == direct.reward == 0.0 and info["reward"] == 0.0
    assert info["termination_reason"] == direct.termination_reason  # the harness's loop rule, here too
    assert inner.db_digest() == direct_env.db_digest()


def test_handover_task_the_user_tools_run_inside():
    gym_env = TauGymEnv(env=TauEnv(make_domain()))
    reward, info, inner = play(gym_env, OracleAgent(), "confirm")
    assert reward == 1.0
    assert any(ev["seat"] == "user" and ev.get("tool_results") for ev in inner.trajectory)


def test_step_misuse_raises_named_errors():
    gym_env = TauGymEnv(env=TauEnv(make_domain()))
    with pytest.raises(tau_env.error.ResetNeeded):
        gym_env.step(say("hi"))
    gym_env.reset(options={"task_id": "nothing"})
    with pytest.raises(InvalidActionError):
        gym_env.step(42)
    gym_env.step(tau_env.call("transfer_to_human", summary="bye"))
    with pytest.raises(EpisodeOverError, match="reset"):
        gym_env.step(say("hello?"))
    with pytest.raises(InvalidOptionError):
        TauGymEnv(env=TauEnv(make_domain()), max_steps=3)
    with pytest.raises(InvalidOptionError):
        TauGymEnv(loop_limit=0)


def user_script(req):
    """The LLM user asks for the restock, then stops; the agent side is not used here."""
    assert seat_of(req) == "user"
    return text("Please restock the widget.") if own_turns(req) == 0 else text("Thanks! ###STOP###")


def restock(gym_env):
    obs, _ = gym_env.reset(seed=5, options={"task_id": "restock"})  # the seed is in the LLM request
    assert obs["messages"][-1]["content"] == "Please restock the widget."
    gym_env.step(tau_env.call("unlock_tool", tool_name="secret_restock_1234"))
    gym_env.step(tau_env.call("secret_restock_1234", item_id="widget"))
    return gym_env.step(say("Done!"))


def test_async_llm_user_from_sync_code():
    with FakeOpenAI(user_script) as server:
        gym_env = TauGymEnv(env=TauEnv(make_domain()), user=LLMUser(ChatClient("u", server.url, backoff=0.01)))
        _, reward, terminated, _, info = restock(gym_env)
        gym_env.close()
    assert (reward, terminated, info["termination_reason"]) == (1.0, True, "user_stop")
    assert len(server.requests) == 2


def test_async_llm_user_from_inside_a_running_loop():
    async def main():
        with FakeOpenAI(user_script) as server:
            gym_env = TauGymEnv(env=TauEnv(make_domain()), user=LLMUser(ChatClient("u", server.url, backoff=0.01)))
            out = restock(gym_env)  # sync calls inside a coroutine: the user runs on the env's own loop
            gym_env.close()
            return out

    _, reward, terminated, _, _ = asyncio.run(main())
    assert (reward, terminated) == (1.0, True)


def test_cached_llm_user_replays_without_its_server(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    with FakeOpenAI(user_script) as server:
        first = restock(TauGymEnv(env=TauEnv(make_domain()), user=LLMUser(ChatClient("u", server.url, cache=cache))))
    # the server is gone: every user turn must come from the cache
    client = ChatClient("u", server.url, cache=cache, retries=0, timeout=1)
    second = restock(TauGymEnv(env=TauEnv(make_domain()), user=LLMUser(client)))
    assert first[1:4] == second[1:4] == (1.0, True, False)
    assert cache.hits >= 2


def test_async_function_user():
    async def user(obs):
        await asyncio.sleep(0)
        return say("Just looking.") if len(obs["messages"]) < 3 else say("Bye. ###STOP###")

    gym_env = TauGymEnv(env=TauEnv(make_domain()), user=user)
    obs, info = gym_env.reset(options={"task_id": "nothing"})
    obs, reward, terminated, truncated, info = gym_env.step(say("Anything else?"))
    assert terminated and reward == 1.0 and info["termination_reason"] == "user_stop"
    gym_env.close()
    gym_env.close()  # closing again is allowed


@needs_tau3_data
def test_tau3_banking_through_gymnasium_make_with_data_dir():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pack's note about the simulator prompt
        gym_env = gymnasium.make("tau_env/tau3-banking", data_dir=str(TAU3_DATA))
        direct_env = tau_env.make("tau3-banking", data_dir=str(TAU3_DATA))
    task_id = direct_env.domain.tasks[0].id
    reward, info, inner = play(gym_env, OracleAgent(), task_id, seed=1)
    direct = run_episode(direct_env, OracleAgent(), ScriptedUser(), task_id, seed=1)
    assert reward == direct.reward
    assert inner.db_digest() == direct_env.db_digest()
    assert inner.trajectory == direct.events


def test_an_episode_over_at_reset_ends_the_standard_loop_at_its_first_step():
    def quitter(obs):  # a user who leaves before the agent says a word
        return say("Never mind. ###STOP###")

    gym_env = TauGymEnv(env=TauEnv(make_domain()), user=quitter)
    obs, info = gym_env.reset(seed=0, options={"task_id": "restock"})
    assert info["episode_over"] is True and info["termination_reason"] == "user_stop"
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated):  # the loop every Gymnasium user writes
        obs, reward, terminated, truncated, info = gym_env.step(say("Hello! How can I help?"))
        steps += 1
    direct_env = TauEnv(make_domain())
    direct = run_episode(direct_env, OracleAgent(), quitter, "restock", seed=0)
    assert steps == 1 and terminated and reward == direct.reward
    assert info["termination_reason"] == direct.termination_reason == "user_stop"
    assert gym_env.unwrapped.env.trajectory == direct.events  # the first step's action was not played
    with pytest.raises(EpisodeOverError, match="already returned terminated"):
        gym_env.step(say("hello?"))
    obs, info = gym_env.reset(seed=0, options={"task_id": "restock"})  # a new episode starts as usual
    assert info["episode_over"] is True


def test_episode_over_is_false_after_an_ordinary_reset():
    gym_env = TauGymEnv(env=TauEnv(make_domain()))
    _, info = gym_env.reset(options={"task_id": "restock"})
    assert info["episode_over"] is False
