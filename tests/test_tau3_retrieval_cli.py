"""``tau-env list --retrieval`` and the endpoint flags of ``tau-env eval`` for tau3-banking."""

from __future__ import annotations

import json

from tau_env.cli import build_parser, main, retrieval_options_of
from tau_env.domains.tau3_banking.prompts import RETRIEVAL
from tests.conftest import TAU3_DATA as DATA
from tests.conftest import needs_shared
from tests.test_tau3_endpoints import opts, server  # noqa: F401  (fixture)


def test_list_retrieval_names_every_configuration_and_what_it_needs(capsys):
    assert main(["list", "--retrieval", "tau3-banking"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["configuration", "knowledge", "tools", "needs"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert list(rows) == list(RETRIEVAL)
    assert "KB_search_bm25, KB_search_dense, shell" in rows["alltools"]
    assert "text-embedding-3-large at https://api.openai.com/v1, key in $OPENAI_API_KEY" in rows["alltools"]
    assert "bubblewrap" in rows["alltools"] and "bubblewrap" in rows["terminal_use_write"]
    assert "qwen/qwen3-embedding-8b at https://openrouter.ai/api/v1" in rows["alltools-qwen"]
    assert "chat endpoint (LLM reranker): gpt-5.2" in rows["bm25_reranker"]
    assert rows["bm25"].rstrip().endswith("nothing") and rows["no_knowledge"].rstrip().endswith("nothing")
    assert "(ours)" in rows["dense_minilm"] and "'embed' extra" in rows["dense_minilm"]


def test_list_retrieval_of_an_unknown_env_is_one_line(capsys):
    assert main(["list", "--retrieval", "nope"]) == 2
    assert capsys.readouterr().err.startswith("tau-env: No environment 'nope' is registered")


def test_eval_flags_become_retrieval_options():
    args = build_parser().parse_args(
        ["eval", "tau3-banking", "--retrieval", "alltools", "--embedding-model", "Qwen/Qwen3-Embedding-8B"]
        + ["--embedding-base-url", "http://127.0.0.1:8000/v1", "--reranker-api-key-env", "MY_KEY"]
    )
    assert retrieval_options_of(args) == {
        "embedding_model": "Qwen/Qwen3-Embedding-8B",
        "embedding_base_url": "http://127.0.0.1:8000/v1",
        "reranker_api_key_env": "MY_KEY",
    }
    assert retrieval_options_of(build_parser().parse_args(["eval", "tau3-banking"])) == {}


@needs_shared(DATA)
def test_eval_with_an_embedding_endpoint(server, tmp_path, capsys):  # noqa: F811
    o = opts(server)
    out = tmp_path / "run"
    argv = ["eval", "tau3-banking", "--data-dir", str(DATA), "--retrieval", "openai_embeddings", "--agent", "noop"]
    argv += ["--task", "task_001", "--quiet", "--out", str(out)]
    argv += ["--embedding-base-url", o["embedding_base_url"], "--embedding-api-key-env", "TAU_TEST_KEY"]
    assert main(argv) == 0
    assert server.calls("/embeddings")  # the documents were embedded there
    config = json.loads((out / "config.json").read_text())
    assert "openai_embeddings" in json.dumps(config)


@needs_shared(DATA)
def test_eval_with_a_missing_key_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("TAU_TEST_MISSING", raising=False)
    argv = ["eval", "tau3-banking", "--data-dir", str(DATA), "--retrieval", "qwen_embeddings", "--agent", "noop"]
    argv += ["--task", "task_001", "--quiet", "--embedding-api-key-env", "TAU_TEST_MISSING"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs an API key in $TAU_TEST_MISSING" in err and err.startswith("tau-env: ")
