"""NeMo Gym: the real NeMo Gym (its own venv, Python >= 3.12) runs tau_env's resources server, its
simple_agent and vllm_model servers on loopback, and collects rollouts from a scripted model server
(FakeOpenAI playing the oracle through the tools and send_message_to_user); each rollout's reward and
final database digest equal tau_env's own episode of the same task.

NeMo Gym needs Python >= 3.12 and pins clash with ours, so it lives in its own venv: ``$TAU_ENV_NEMO_GYM_VENV``
(default ``../venv-nemogym`` beside the checkout); the tests that need it skip without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tau_env
from tau_env import OracleAgent, ScriptedUser, run_episode
from tau_env.testing import FakeOpenAI, Reply, text, tool

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("TAU_ENV_NEMO_GYM_VENV") or REPO.parent / "venv-nemogym")
PY = VENV / "bin" / "python"
TASKS = ["travel_notice_simple", "open_cd_minimum", "lost_card_standard_shipping"]
GARBAGE = "lost_card_standard_shipping"  # the scripted model answers this one with garbage text

needs_venv = pytest.mark.skipif(not PY.exists(), reason=f"needs NeMo Gym's own venv at {VENV} (see docs/adapters.md)")


def in_venv(code: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PY), "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def oracle_model(openings: dict[str, str]):
    """A chat-completions script: the oracle of the task whose opening the request carries, in NeMo Gym's
    tool mode (messages to the user through send_message_to_user; a plain reply once the user has left).
    """
    env = tau_env.make("harbor-bank-v0")
    tasks = {t.id: t for t in env.domain.tasks}

    def script(req) -> Reply:
        msgs = req["messages"]
        user_first = next(m["content"] for m in msgs if m["role"] == "user")
        task_id = openings[user_first]
        if task_id == GARBAGE:
            return text("asdf qwerty <tool_call>{not json")
        done = sum(1 for m in msgs if m["role"] == "assistant" and m.get("tool_calls"))
        last = msgs[-1]
        if last["role"] == "tool" and "conversation has ended" in (last.get("content") or ""):
            return text("Goodbye!")
        agent = OracleAgent()
        agent.reset(task=tasks[task_id], seed=0)
        for _ in range(done + 1):
            action = agent(None)
        if action.get("tool_calls"):
            fn = action["tool_calls"][0]["function"]
            return tool(fn["name"], fn["arguments"], call_id=f"c{done}")
        return tool("send_message_to_user", {"message": action["content"]}, call_id=f"c{done}")

    return script


def test_without_nemo_gym_the_import_names_the_extra():
    code = "import sys; sys.modules['nemo_gym'] = None; import tau_env.adapters.nemo_gym"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "AdapterError" in out.stderr and "pip install 'tau-env[nemo-gym]'" in out.stderr


@pytest.fixture(scope="module")
def gym_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("nemo_gym_root")
    out = in_venv(
        f"""
        from tau_env.adapters.nemo_gym import write_environment
        print(write_environment({str(root)!r}, "harbor-bank-v0", {TASKS!r}, max_steps=40))
        """,
        root,
    )
    assert out.returncode == 0, out.stderr
    return root


@needs_venv
def test_write_environment_files(gym_root):
    folder = gym_root / "resources_servers" / "tau_env"
    config = json.loads((folder / "configs" / "tau_env.yaml").read_text())
    server = config["tau_env_resources_server"]["resources_servers"]["tau_env"]
    agent = config["tau_env_simple_agent"]["responses_api_agents"]["simple_agent"]
    assert server["env_id"] == "harbor-bank-v0" and server["user"] == "scripted"
    assert agent["resources_server"]["name"] == "tau_env_resources_server" and agent["max_steps"] == 40
    rows = [json.loads(line) for line in (folder / "data" / "train.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == TASKS
    names = [t["name"] for t in rows[0]["responses_create_params"]["tools"]]
    assert names[-1] == "send_message_to_user" and "unlock_tool" in names and "set_travel_notice_3012" in names
    assert rows[0]["responses_create_params"]["input"][-1] == {"role": "user", "content": rows[0]["tau_env_opening"][0]}


@needs_venv
@pytest.mark.slow
def test_rollout_collection_through_real_nemo_gym_scores_as_the_env(gym_root, tmp_path):
    rows = [
        json.loads(line)
        for line in (gym_root / "resources_servers/tau_env/data/train.jsonl").read_text().split("\n")
        if line
    ]
    openings = {r["tau_env_opening"][0]: r["task_id"] for r in rows}
    # NeMo Gym starts each server in a venv of its own; all three share this one
    venvs = tmp_path / "venvs"
    for kind, name in [
        ("resources_servers", "tau_env"),
        ("responses_api_agents", "simple_agent"),
        ("responses_api_models", "vllm_model"),
    ]:
        (venvs / kind / name).mkdir(parents=True)
        (venvs / kind / name / ".venv").symlink_to(VENV)
    output = tmp_path / "rollouts.jsonl"
    with FakeOpenAI(oracle_model(openings)) as model:
        args = [
            str(VENV / "bin" / "nemo_gym_e2e_collect_rollouts"),
            "+config_paths=[resources_servers/tau_env/configs/tau_env.yaml,responses_api_models/vllm_model/configs/vllm_model.yaml]",
            f"+policy_base_url={model.url}",
            "+policy_api_key=EMPTY",
            "+policy_model_name=oracle",
            "++policy_model.responses_api_models.vllm_model.uses_reasoning_parser=false",
            "+agent_name=tau_env_simple_agent",
            "+split=train",
            f"+output_jsonl_fpath={output}",
            f"+uv_venv_dir={venvs}",
            "+skip_venv_if_present=true",
            "+upload_rollouts_to_wandb=false",
            "+default_host=127.0.0.1",
        ]
        proc = subprocess.run(args, cwd=gym_root, capture_output=True, text=True, timeout=540)
    assert output.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    results = {}
    for line in output.read_text().splitlines():
        r = json.loads(line)
        results[r["task_id"]] = r
    assert sorted(results) == sorted(TASKS)
    garbage = results.pop(GARBAGE)
    start = tau_env.make("harbor-bank-v0")
    start.reset(seed=0, options={"task_id": GARBAGE})
    assert garbage["reward"] == 0.0 and garbage["db_digest"] == start.db_digest()  # nothing changed, graded 0
    for task_id, r in results.items():
        direct_env = tau_env.make("harbor-bank-v0")
        direct = run_episode(direct_env, OracleAgent(), ScriptedUser(), task_id, seed=0)
        assert r["reward"] == direct.reward == 1.0
        assert r["db_digest"] == direct_env.db_digest()
        assert r["termination_reason"] == "user_stop"
