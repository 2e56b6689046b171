"""Parquet for veRL: SFT rows from export-sft examples read back by the TauSFTDataset (veRL's
MultiTurnSFTDataset, loss only on the agent's own turns), and RL rows of tasks read back into the
episode the agent loop plays. Runs only where veRL is installed; skips elsewhere.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("verl")
pytest.importorskip("pyarrow")

import pandas as pd  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tau_env.reference_trainers import verl_data as vd  # noqa: E402
from tau_env.reference_trainers.verl_agent_loop import make_env  # noqa: E402
from verl_helpers import tiny_tokenizer  # noqa: E402

import tau_env  # noqa: E402
from tau_env.error import InvalidOptionError, TaskFileError  # noqa: E402
from tau_env.sft import to_example  # noqa: E402

ENV_ID, TASK = "harbor-bank-v0", "update_email_and_phone"


@pytest.fixture(scope="module")
def example():
    env = tau_env.make(ENV_ID)
    r = tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id=TASK)
    assert r.reward == 1.0
    return to_example(r.to_dict())


def test_sft_parquet_round_trip_and_loss_only_on_trained_turns(example, tmp_path):
    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps(example) + "\n\n" + json.dumps(example) + "\n", encoding="utf-8")
    assert vd.main(["sft", str(src), str(tmp_path / "sft.parquet")]) == 0
    df = pd.read_parquet(tmp_path / "sft.parquet")
    assert len(df) == 2
    assert json.loads(df["messages_json"][0]) == example["messages"]
    assert json.loads(df["tools_json"][0]) == example["tools"]
    assert list(df["train"][0]) == example["train"]

    tok = tiny_tokenizer()
    cfg = OmegaConf.create({"max_length": 50000, "pad_mode": "no_padding", "truncation": "error"})
    ds = vd.TauSFTDataset(parquet_files=str(tmp_path / "sft.parquet"), tokenizer=tok, config=cfg)
    assert len(ds) == 2
    item = ds[0]
    ids, loss = item["input_ids"], item["loss_mask"].bool()
    trained = tok.decode(ids[loss])
    greeting = example["messages"][1]["content"]
    assert example["messages"][1]["role"] == "assistant" and not example["train"][1]
    assert greeting not in trained  # the env's greeting: context, no loss
    for m, flag in zip(example["messages"], example["train"], strict=True):
        if flag and m.get("content"):
            assert m["content"] in trained  # every trained turn's text carries loss
        if m["role"] in ("user", "tool", "system") and m.get("content") and len(m["content"]) > 20:
            assert m["content"] not in trained
    # the whole conversation is in the input (the context stays)
    assert greeting in tok.decode(ids)


def test_sft_rows_hold_the_tools_of_the_start_as_the_agent_loop_renders_them():
    env = tau_env.make(ENV_ID)
    r = tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id="travel_notice_simple")
    ex = to_example(r.to_dict())
    row = vd.sft_row(ex)
    names = [t["function"]["name"] for t in json.loads(row["tools_json"])]
    assert "set_travel_notice_3012" in [t["function"]["name"] for t in ex["tools"]]
    assert "set_travel_notice_3012" not in names  # unlocked during the episode: not in the prompt from the start
    assert names == [t["function"]["name"] for t in ex["tools"] if t["function"]["name"] != "set_travel_notice_3012"]
    assert json.loads(row["messages_json"]) == ex["messages"]  # the unlock call itself stays


def test_sft_rows_refuse_bad_examples(tmp_path):
    with pytest.raises(InvalidOptionError, match="export-sft"):
        vd.read_sft_jsonl(tmp_path / "none.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}], "train": [true, false]}\n', encoding="utf-8")
    with pytest.raises(InvalidOptionError, match="one per message"):
        vd.read_sft_jsonl(bad)
    row = vd.sft_row({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})
    assert row["train"] == [False, True]


BAD_VALUES = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=6),
    st.sampled_from(["[1, 2", "{}", "[]", '[{"role": 3}]', "[true]"]),
    st.lists(st.one_of(st.integers(), st.booleans(), st.text(max_size=3), st.none()), max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(["messages", "tools", "train"]), value=BAD_VALUES)
def test_an_sft_row_is_built_or_refused_with_where_it_came_from(example, key, value):
    bad = {**example, key: value}
    try:
        row = vd.sft_row(bad, where="data.jsonl:7")
    except InvalidOptionError as e:
        assert str(e).startswith("data.jsonl:7: ")
        return
    # built: then every column decodes to the list the trainer reads, one train flag per message
    messages = json.loads(row["messages_json"])
    assert isinstance(messages, list) and messages and all(isinstance(m.get("role"), str) for m in messages)
    assert isinstance(json.loads(row["tools_json"]), list) and len(row["train"]) == len(messages)


def test_the_command_line_gives_one_error_line_and_exit_2(example, tmp_path, capsys):
    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps(example) + "\n[1, 2]\n", encoding="utf-8")
    out = tmp_path / "sft.parquet"
    assert vd.main(["sft", str(src), str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{src}:2: " in err and not out.exists()
    assert vd.main(["rl", ENV_ID, str(tmp_path / "rl.parquet"), "--make-kwargs", "{max_steps: 3}"]) == 2
    assert "--make-kwargs is not JSON" in capsys.readouterr().err
    assert vd.main(["rl", ENV_ID, str(tmp_path / "rl.parquet"), "--make-kwargs", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err
    assert not (tmp_path / "rl.parquet").exists()


def test_rl_rows_of_the_env_tasks_round_trip(tmp_path):
    rows = vd.rl_rows(ENV_ID, task_ids=[TASK, "lost_card_standard_shipping"], seed=7)
    assert vd.write_rl_parquet(rows, tmp_path / "rl.parquet") == 2
    df = pd.read_parquet(tmp_path / "rl.parquet")
    assert list(df["agent_name"]) == ["tau_agent", "tau_agent"]
    assert list(df["data_source"]) == [f"tau_env/{ENV_ID}"] * 2
    spec = vd.episode_spec(df["extra_info"][0])
    assert (spec.env_id, spec.task_id, spec.seed, spec.task, spec.make_kwargs) == (ENV_ID, TASK, 7, None, {})
    assert df["extra_info"][1]["index"] == 1
    env = make_env(spec)
    r = tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id=spec.task_id)
    assert r.reward == 1.0


def test_rl_rows_embed_tasks_of_a_file(tmp_path):
    domain = tau_env.registry.load_domain(ENV_ID)
    task = domain.task_index[TASK].model_copy(update={"id": "synth_0001"})
    tau_env.save_tasks([task], tmp_path / "tasks.jsonl")
    assert vd.main(["rl", ENV_ID, str(tmp_path / "rl.parquet"), "--tasks", str(tmp_path / "tasks.jsonl")]) == 0
    df = pd.read_parquet(tmp_path / "rl.parquet")
    spec = vd.episode_spec(df["extra_info"][0])
    assert spec.task_id == "synth_0001" and spec.task["id"] == "synth_0001"
    env = make_env(spec)  # the row alone is enough: no task file on the worker
    r = tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id="synth_0001")
    assert r.reward == 1.0
    with pytest.raises(TaskFileError, match="nope"):
        vd.rl_rows(ENV_ID, task_ids=["nope"])


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda a: a.update(name="set_travel_notise"), "no tool named 'set_travel_notise'"),
        (lambda a: a.update(requestor="user"), "but the requestor is 'user'"),
    ],
)
def test_a_hand_made_row_whose_task_cannot_be_graded_is_refused_not_played(change, said):
    """A row built by hand (not by verl_data rl, which loads the file and checks it): its embedded task
    naming a tool the env lacks used to be played and graded 0 without a word."""
    domain = tau_env.registry.load_domain(ENV_ID)
    task = domain.task_index[TASK].model_dump(mode="json")
    task["id"] = "hand_made"
    change(task["actions"][-1])
    row = vd.rl_row(ENV_ID, tau_env.Task.model_validate(task), 0, embed_task=True)
    spec = vd.episode_spec(row["extra_info"])
    for _ in range(2):  # refused every time it is drawn, not only the first
        with pytest.raises(TaskFileError, match=f"RL row of task 'hand_made'.*{said}"):
            make_env(spec)
    good = domain.task_index[TASK].model_copy(update={"id": "hand_made_ok"})
    ok = vd.episode_spec(vd.rl_row(ENV_ID, good, 0, embed_task=True)["extra_info"])
    env = make_env(ok)
    assert tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id="hand_made_ok").reward == 1.0


def test_rows_of_a_task_file_with_a_pool_in_make_kwargs_play_on_the_workers(tmp_path):
    domain = tau_env.registry.load_domain(ENV_ID)
    tasks = [domain.task_index[t] for t in (TASK, "lost_card_standard_shipping", "found_card_unlock")]
    tau_env.save_tasks(tasks, tmp_path / "tasks.jsonl")
    pool = [TASK, "found_card_unlock"]
    rows = vd.rl_rows(ENV_ID, tasks=tmp_path / "tasks.jsonl", make_kwargs={"task_ids": pool})
    assert [r["extra_info"]["task_id"] for r in rows] == pool
    for row in rows:  # each row embeds its task; the env made for it plays that one
        spec = vd.episode_spec(row["extra_info"])
        env = make_env(spec)
        assert (
            tau_env.run_episode(env, tau_env.OracleAgent(), tau_env.ScriptedUser(), task_id=spec.task_id).reward == 1.0
        )


def test_episode_spec_names_what_is_missing():
    with pytest.raises(InvalidOptionError, match="extra_info"):
        vd.episode_spec(None)
    with pytest.raises(InvalidOptionError, match="task_id"):
        vd.episode_spec({"env_id": ENV_ID})


@pytest.mark.parametrize("family", ["smollm2", "qwen", None])
def test_sft_rows_render_with_the_familys_tool_template_not_the_models_own(example, tmp_path, family):
    """The veRL SFT dataset renders as the tau_agent loop and the CPU trainers do (the family's tool
    template, data.tau_family; null: the tokenizer's family), whatever template the model ships."""
    from tau_env.reference_trainers.cpu_common import chat_template_for, tokenizer_family

    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps(example) + "\n", encoding="utf-8")
    assert vd.main(["sft", str(src), str(tmp_path / "sft.parquet")]) == 0
    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # a model's own, tool-blind
    cfg = OmegaConf.create({"max_length": 50000, "pad_mode": "no_padding", "truncation": "error", "tau_family": family})
    ds = vd.TauSFTDataset(parquet_files=str(tmp_path / "sft.parquet"), tokenizer=tok, config=cfg)
    want = chat_template_for(tok, family or tokenizer_family(tok))
    assert ds.tokenizer.chat_template == want != "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    text = tok.decode(ds[0]["input_ids"])
    assert '"name": "verify_identity"' in text and "<tool_call>" in text  # the calls are rendered
    bad = OmegaConf.create({"max_length": 50000, "pad_mode": "no_padding", "tau_family": "llama"})
    with pytest.raises(InvalidOptionError, match="data.tau_family must be one of"):
        vd.TauSFTDataset(parquet_files=str(tmp_path / "sft.parquet"), tokenizer=tiny_tokenizer(), config=bad)
