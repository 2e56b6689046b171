"""The in-process transformers backend, on a tiny random model with a tokenizer trained here."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tau_env import ScriptedUser, TauEnv, arun_episode  # noqa: E402
from tau_env.llm import LLMAgent, Sampling  # noqa: E402
from tests.conftest import make_domain  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}<|im_end|>\n{% endfor %}"
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t['function']['name'] }} {% endfor %}<|im_end|>\n"
    "{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = ["Please restock the widget, thank you.", "unlock_tool secret_restock_1234 get_item widget"] * 50
    tk.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=TEMPLATE
    )
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=tk.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_local_model_plays_the_agent_seat(tiny_model):
    from tau_env.llm import TransformersClient

    client = TransformersClient(tiny_model, sampling=Sampling(max_tokens=8))
    agent = LLMAgent(client)
    r = asyncio.run(arun_episode(TauEnv(make_domain(), max_steps=6), agent, ScriptedUser(), "restock", seed=1))
    assert r.termination_reason in ("user_stop", "max_steps")
    assert (
        r.usage["agent"]["requests"] >= 1
        and 0 < r.usage["agent"]["completion_tokens"] <= 8 * r.usage["agent"]["requests"]
    )
    agent_turns = [ev for ev in r.events if ev["seat"] == "agent"]
    assert agent_turns and all("message" in ev for ev in agent_turns)
    # greedy decoding with the same seed replays the same episode
    again = asyncio.run(
        arun_episode(TauEnv(make_domain(), max_steps=6), LLMAgent(client), ScriptedUser(), "restock", seed=1)
    )
    assert again.events == r.events


def test_the_prompt_goes_where_a_loaded_model_lives(tiny_model):
    """A model a caller loaded on another device (a GPU) gets its prompt there: "meta" stands in for
    it here, and a stand-in generate records where its inputs are."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tau_env.llm import TransformersClient

    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_model, local_files_only=True)
    seen = []

    def generate(input_ids, **kwargs):
        seen.append({k: v.device.type for k, v in {"input_ids": input_ids, **kwargs}.items() if torch.is_tensor(v)})
        return torch.cat([input_ids.new_zeros(input_ids.shape, device="cpu"), torch.tensor([[tok.eos_token_id]])], 1)

    model.generate = generate
    model.to("meta")
    client = TransformersClient(model, tok, sampling=Sampling(max_tokens=4))
    asyncio.run(client.complete([{"role": "user", "content": "Please restock the widget."}]))
    assert seen == [{"input_ids": "meta", "attention_mask": "meta"}]


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 300)),
            st.tuples(st.just("crop"), st.integers(1, 50)),
            st.tuples(st.just("repeat"), st.just(2)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_growing_cache_holds_what_transformers_own_cache_holds(ops):
    """Appends (past the spare room), crops and batch repeats: the same keys and values as DynamicCache."""
    import torch
    from transformers import DynamicCache, LlamaConfig

    from tau_env.llm.local import growing_cache

    config = LlamaConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    plain, grown = DynamicCache(config=config), growing_cache(config)
    assert all(type(a) is not type(b) for a, b in zip(plain.layers, grown.layers))
    gen = torch.Generator().manual_seed(0)
    batch = 1
    for op, n in ops:
        if op == "add":
            for layer in range(2):
                k, v = torch.randn(batch, 1, n, 8, generator=gen), torch.randn(batch, 1, n, 8, generator=gen)
                want = plain.update(k, v, layer)
                got = grown.update(k, v, layer)
                assert all(torch.equal(a, b) for a, b in zip(want, got))
        elif op == "crop" and plain.get_seq_length() > n:
            plain.crop(-n)
            grown.crop(-n)
        elif op == "repeat" and batch < 4 and plain.get_seq_length():
            plain.batch_repeat_interleave(n)
            grown.batch_repeat_interleave(n)
            batch *= n
        assert plain.get_seq_length() == grown.get_seq_length()
        for a, b in zip(plain.layers, grown.layers):
            if a.is_initialized:
                assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
