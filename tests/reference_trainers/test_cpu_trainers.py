"""The CPU trainers' plumbing with a tiny random model: one SFT step and one GRPO step through the
real code paths, agent-only gradients, checkpoints written, reloaded and resumed, and a checkpoint
played by ``tau-env eval --agent-checkpoint``.

The model is a 2-layer Llama with 32 hidden units and a byte-level BPE trained here on Harbor
Bank's text (ChatML specials): offline, in CI, in seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import grpo, sft  # noqa: E402
from tau_env.reference_trainers.checkpoint import (  # noqa: E402
    INFO_FILE,
    find_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    read_info,
    resolve_checkpoint,
)
from tau_env.reference_trainers.cpu_common import (  # noqa: E402
    LoRALinear,
    add_lora,
    check_resume,
    common_prefix_len,
    content_digest,
    initial_tools,
    merged_state_dict,
    predicting_positions,
    prefix_cache,
    prefix_shared_logits,
    split_point,
    svg_plot,
    tokenize_sft_example,
)
from tau_env.reference_trainers.objectives import sft_loss  # noqa: E402
from tau_env.reference_trainers.rollout import TokenTrajectory  # noqa: E402

import tau_env  # noqa: E402
from tau_env.error import InvalidOptionError, ResultsFolderError  # noqa: E402
from tau_env.sft import to_example, truncate  # noqa: E402

ENV = "harbor-bank-v0"
TASKS = ["travel_notice_simple", "found_card_unlock"]


def _oracle_examples() -> list[dict]:
    run = tau_env.evaluate(ENV, tau_env.OracleAgent, tau_env.ScriptedUser, task_ids=TASKS, retrieval="none")
    return [to_example(r.to_dict()) for r in run.results]


@pytest.fixture(scope="module")
def examples() -> list[dict]:
    return _oracle_examples()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, examples) -> Path:
    """A tiny random Llama and a BPE tokenizer trained on the examples' text, saved as a model folder."""
    from tau_env.reference_trainers.chat_templates import SMOLLM2_TOOLS_TEMPLATE
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [json.dumps(ex) for ex in examples] * 3 + [json.dumps(ex["tools"]) for ex in examples]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = SMOLLM2_TOOLS_TEMPLATE
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16384,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    path = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    fast.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def sft_file(tmp_path_factory, examples) -> Path:
    path = tmp_path_factory.mktemp("data") / "sft.jsonl"
    path.write_text("".join(json.dumps(ex) + "\n" for ex in examples), encoding="utf-8")
    return path


def _tok_model(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(tiny_dir)), AutoTokenizer.from_pretrained(str(tiny_dir))


# --- data ------------------------------------------------------------------------------------------


def test_sft_tokens_carry_loss_exactly_on_the_trained_agent_turns(tiny_dir, examples):
    _, tok = _tok_model(tiny_dir)
    ex = examples[0]
    s = tokenize_sft_example(tok, ex, tok.chat_template)
    assert len(s.input_ids) == len(s.loss_mask) and set(s.loss_mask) == {0, 1}
    segments, cur = [], []
    for i, m in zip(s.input_ids, s.loss_mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            segments.append(cur)
            cur = []
    if cur:
        segments.append(cur)
    trained = [m for m, t in zip(ex["messages"], ex["train"], strict=True) if t]
    assert len(segments) == len(trained)  # one masked run per trained turn; the greeting has none
    assert not ex["train"][1] and ex["messages"][1]["role"] == "assistant"  # the env's greeting
    greeting = ex["messages"][1]["content"]
    for seg, msg in zip(segments, trained, strict=True):
        text = tok.decode(seg)
        assert text.endswith("<|im_end|>")
        assert greeting not in text
        for call in msg.get("tool_calls") or []:
            assert call["function"]["name"] in text
    # the prompt holds the tools the agent started with (unlocked ones are not rendered up front)
    unlocked = {t["function"]["name"] for t in ex["tools"]} - {t["function"]["name"] for t in initial_tools(ex)}
    assert unlocked and not any(name in tok.decode(s.input_ids[: s.loss_mask.index(1)]) for name in unlocked)


def test_an_example_cut_after_any_trained_turn_renders_as_a_prefix_of_the_whole(tiny_dir, examples):
    """A cut example (the recipe's first-turn examples) is trained on exactly the tokens the whole
    one starts with: the same tools in the prompt, though its unlock calls were cut off."""
    _, tok = _tok_model(tiny_dir)
    cut_away = 0
    for ex in examples:
        whole = tokenize_sft_example(tok, ex, tok.chat_template)
        for k in [i for i, t in enumerate(ex["train"]) if t]:
            cut = tokenize_sft_example(tok, truncate(ex, k + 1), tok.chat_template)
            n = len(cut.input_ids)
            assert whole.input_ids[:n] == cut.input_ids and whole.loss_mask[:n] == cut.loss_mask
            naive = {**ex, "messages": ex["messages"][: k + 1], "train": ex["train"][: k + 1]}
            if tokenize_sft_example(tok, naive, tok.chat_template).input_ids != cut.input_ids:
                cut_away += 1  # cutting the messages alone keeps the tools unlocked after the cut
    assert cut_away  # travel_notice_simple unlocks set_travel_notice_3012 after its lookup


def test_prefix_shared_forward_equals_full_forward(tiny_dir, examples):
    model, tok = _tok_model(tiny_dir)
    samples = [tokenize_sft_example(tok, ex, tok.chat_template) for ex in examples]
    ids = [s.input_ids for s in samples]
    p = split_point(ids, [s.loss_mask for s in samples])
    assert 0 < p < common_prefix_len(ids) + 1
    with torch.no_grad():
        logits, valid = prefix_shared_logits(model, ids, p)
        for b, seq in enumerate(ids):
            full = model(torch.tensor([seq])).logits[0, p:]
            n = len(seq) - p
            assert int(valid[b].sum()) == n
            torch.testing.assert_close(logits[b, :n], full, atol=1e-4, rtol=1e-4)


def test_a_prefix_without_gradient_gives_the_same_logits_and_trains_only_through_the_suffix(tiny_dir, examples):
    def run(prefix_grad):
        model, tok = _tok_model(tiny_dir)
        torch.manual_seed(0)
        add_lora(model, 4, 8.0)
        for m in model.modules():  # LoRA starts at B = 0; move it so the prefix's keys depend on it
            if isinstance(m, LoRALinear):
                torch.nn.init.normal_(m.lora_B, std=0.02)
        samples = [tokenize_sft_example(tok, ex, tok.chat_template) for ex in examples]
        ids, masks = [s.input_ids for s in samples], [s.loss_mask for s in samples]
        p = split_point(ids, masks)
        logits, valid = prefix_shared_logits(model, ids, p, prefix_grad=prefix_grad)
        width = logits.shape[1]
        suffix = torch.tensor([i[p:] + [0] * (width - len(i) + p) for i in ids])
        mask = torch.tensor([m[p:] + [0] * (width - len(m) + p) for m in masks]) * valid
        sft_loss(logits, suffix, mask).backward()
        grads = [m.lora_B.grad.clone() for m in model.modules() if isinstance(m, LoRALinear)]
        return logits.detach(), grads

    exact_logits, exact = run(True)
    cheap_logits, cheap = run(False)
    torch.testing.assert_close(cheap_logits, exact_logits)
    assert all(torch.isfinite(g).all() for g in cheap) and any(g.abs().sum() > 0 for g in cheap)
    # the gradient differs (the path through the prefix's keys and values is cut), but not wildly
    diff = sum(float((a - b).norm()) for a, b in zip(cheap, exact))
    total = sum(float(b.norm()) for b in exact)
    assert 0 < diff < total


def _lora_model(tiny_dir, seed=0):
    model, tok = _tok_model(tiny_dir)
    torch.manual_seed(seed)
    add_lora(model, 4, 8.0)
    for m in model.modules():  # LoRA starts at B = 0; move it so every path depends on it
        if isinstance(m, LoRALinear):
            torch.nn.init.normal_(m.lora_B, std=0.02)
    return model, tok


def _lora_grads(model):
    return [m.lora_B.grad.clone() for m in model.modules() if isinstance(m, LoRALinear)]


def test_the_output_layer_on_trained_positions_only_gives_the_full_loss_and_gradient(tiny_dir, examples):
    """micro_step keeps the logits that predict a trained token: the same loss and LoRA gradient."""

    def full(model, samples, total):
        ids, masks = [s.input_ids for s in samples], [s.loss_mask for s in samples]
        p = split_point(ids, masks)
        logits, valid = prefix_shared_logits(model, ids, p)
        width = logits.shape[1]
        suffix = torch.tensor([i[p:] + [0] * (width - len(i) + p) for i in ids])
        mask = torch.tensor([m[p:] + [0] * (width - len(m) + p) for m in masks]) * valid
        loss = sft_loss(logits, suffix, mask, reduction="sum") / total
        loss.backward()
        return float(loss.detach())

    model, tok = _lora_model(tiny_dir)
    samples = [tokenize_sft_example(tok, ex, tok.chat_template) for ex in examples]
    total = sum(sum(s.loss_mask) for s in samples)
    want = full(model, samples, total)
    want_grads = _lora_grads(model)
    model.zero_grad()
    got, _ = sft.micro_step(model, samples, total)
    assert got == pytest.approx(want, rel=1e-5)
    for a, b in zip(_lora_grads(model), want_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    keep = predicting_positions([[0, 1, 1, 0, 0], [0, 0, 0, 1]])
    assert keep.tolist() == [0, 1, 2]


def test_a_prefix_computed_once_per_step_equals_one_per_micro_batch(tiny_dir, examples):
    """Without prefix gradient, the step's shared prefix cache gives each micro-batch's loss and gradient."""
    model, tok = _lora_model(tiny_dir)
    samples = [tokenize_sft_example(tok, ex, tok.chat_template) for ex in examples] * 2
    total = sum(sum(s.loss_mask) for s in samples)
    ids, masks = [s.input_ids for s in samples], [s.loss_mask for s in samples]
    p = split_point(ids, masks)
    cache = prefix_cache(model, ids[0][:p])
    before = [(k.clone(), v.clone()) for k, v in ((layer.keys, layer.values) for layer in cache.layers)]
    losses = {}
    for shared in (False, True):
        model.zero_grad()
        losses[shared] = [
            sft.micro_step(model, samples[i : i + 2], total, False, (p, cache) if shared else None)[0]
            for i in range(0, len(samples), 2)
        ]
        grads = _lora_grads(model)
        if not shared:
            want = grads
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)
    for a, b in zip(grads, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    # the shared cache is left as it was, for the next micro-batch
    assert cache.get_seq_length() == p
    for (k, v), layer in zip(before, cache.layers, strict=True):
        assert torch.equal(k, layer.keys) and torch.equal(v, layer.values)
    with pytest.raises(InvalidOptionError, match="no gradient"):
        prefix_shared_logits(model, ids[:2], p, prefix_grad=True, cache=cache)
    with pytest.raises(InvalidOptionError, match="holds"):
        prefix_shared_logits(model, ids[:2], p - 1, prefix_grad=False, cache=cache)


def test_sft_gradient_reaches_only_agent_token_predictions(tiny_dir, examples):
    model, tok = _tok_model(tiny_dir)
    add_lora(model, 4, 8.0)
    samples = [tokenize_sft_example(tok, ex, tok.chat_template) for ex in examples]
    ids, masks = [s.input_ids for s in samples], [s.loss_mask for s in samples]
    p = split_point(ids, masks)
    logits, valid = prefix_shared_logits(model, ids, p)
    logits.retain_grad()
    width = logits.shape[1]
    suffix = torch.tensor([i[p:] + [0] * (width - len(i) + p) for i in ids])
    mask = torch.tensor([m[p:] + [0] * (width - len(m) + p) for m in masks]) * valid
    loss = sft_loss(logits, suffix, mask)
    loss.backward()
    assert torch.isfinite(loss)
    has_grad = logits.grad.abs().sum(-1) > 0  # [B, S]: position t predicts token t + 1
    predicts_agent = torch.zeros_like(has_grad)
    predicts_agent[:, :-1] = mask[:, 1:].bool()
    assert torch.equal(has_grad, predicts_agent)
    lora_grads = [m.lora_B.grad for m in model.modules() if isinstance(m, LoRALinear)]
    assert all(g is not None for g in lora_grads) and any(g.abs().sum() > 0 for g in lora_grads)
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)


def test_merged_weights_give_the_lora_model_outputs(tiny_dir):
    model, _ = _tok_model(tiny_dir)
    plain, _ = _tok_model(tiny_dir)
    add_lora(model, 4, 8.0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, LoRALinear):
                m.lora_B.normal_(0, 0.05)
    plain.load_state_dict(merged_state_dict(model))
    x = torch.arange(40).unsqueeze(0)
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, plain(x).logits, atol=1e-4, rtol=1e-4)


# --- the trainers end to end --------------------------------------------------------------------


def _one_step_sft(tiny_dir: Path, data: Path, out: Path) -> sft.SFTConfig:
    """One SFT step of batch 2 on ``data`` into ``out`` (LoRA rank 4, no knowledge tools)."""
    return sft.SFTConfig(
        model=str(tiny_dir), data=[str(data)], out=str(out), steps=1, batch_size=2, micro_batch=2,
        lora_rank=4, retrieval="none", progress=False,
    )  # fmt: skip


def test_one_sft_step_checkpoints_and_resume_continues(tiny_dir, sft_file, tmp_path):
    out = tmp_path / "sft"
    cfg = _one_step_sft(tiny_dir, sft_file, out)
    first = sft.train(cfg)
    assert first.name == "step-000001" and latest_checkpoint(out) == first
    [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["loss"] > 0 and row["agent_tokens"] > 0 and 0 < row["agent_fraction"] < 1
    info = read_info(first)
    assert info["trainer"] == "sft" and info["agent"]["retrieval"] == "none" and info["lora"]["rank"] == 4
    # reloaded for inference: a plain model folder with the trainer's template
    ck = load_checkpoint(first)
    assert ck.step == 1 and "<tool_call>" in ck.chat_template
    assert not any(isinstance(m, LoRALinear) for m in ck.model.modules())
    # resumed for training: LoRA factors back, the merged delta taken out of the base weights
    state_before = load_checkpoint(first, for_training=True)
    assert any(isinstance(m, LoRALinear) for m in state_before.model.modules())
    second = sft.train(sft.SFTConfig(**{**cfg.__dict__, "steps": 2}))
    assert second.name == "step-000002"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["loss"] == r["loss"] for r in rows)
    assert (out / "metrics.svg").read_text().startswith("<svg")


def test_a_killed_sft_run_resumes_from_its_last_checkpoint_to_the_same_weights(
    tiny_dir, sft_file, tmp_path, monkeypatch
):
    def cfg(out: Path) -> sft.SFTConfig:
        return sft.SFTConfig(
            model=str(tiny_dir), data=[str(sft_file)], out=str(out), steps=5, batch_size=1, micro_batch=1,
            lora_rank=4, lr=1e-2, retrieval="none", save_every=2, threads=1, progress=False,
        )  # fmt: skip

    whole = load_checkpoint(sft.train(cfg(tmp_path / "whole"))).model.state_dict()
    calls = {"n": 0}
    real = sft.micro_step

    def dies_in_step_4(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # killed half-way through step 4
        return real(*args, **kwargs)

    out = tmp_path / "killed"
    monkeypatch.setattr(sft, "micro_step", dies_in_step_4)
    with pytest.raises(KeyboardInterrupt):
        sft.train(cfg(out))
    assert latest_checkpoint(out).name == "step-000002"  # the last save before the kill (every 2 steps)
    monkeypatch.setattr(sft, "micro_step", real)
    last = sft.train(cfg(out))  # the same command again
    assert last.name == "step-000005"
    resumed = load_checkpoint(last).model.state_dict()
    for k in whole:  # bit for bit: the base unmerged from the checkpoint is the base trained (unmerge_fixups)
        assert torch.equal(resumed[k], whole[k]), k
    w = [json.loads(x) for x in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    keys = ("loss", "lr", "grad_norm")  # the same batches, in order, and the same gradients
    assert [[r[k] for k in keys] for r in rows] == [[r[k] for k in keys] for r in w]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]  # step 3's row of the killed run is not kept twice


def test_sft_resume_reloads_the_lora_factors(tiny_dir, sft_file, tmp_path):
    out = tmp_path / "sft"
    cfg = sft.SFTConfig(
        model=str(tiny_dir), data=[str(sft_file)], out=str(out), steps=1, batch_size=1, micro_batch=1,
        lora_rank=4, lr=1e-2, progress=False,
    )  # fmt: skip
    path = sft.train(cfg)
    merged = load_checkpoint(path).model
    again = load_checkpoint(path, for_training=True).model
    x = torch.arange(30).unsqueeze(0)
    with torch.no_grad():
        torch.testing.assert_close(merged(x).logits, again(x).logits, atol=1e-4, rtol=1e-4)
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    assert state["optimizer"]["state"] and any(v.abs().sum() > 0 for k, v in state["lora"].items() if "lora_B" in k)


@pytest.mark.parametrize(
    "change, named",
    [
        ({"lr": 1e-3}, "lr: 0.0002 there, 0.001 now"),
        ({"batch_size": 1, "micro_batch": 1}, "batch-size: 2 there, 1 now"),
        ({"turn_prefixes": 1}, "turn-prefixes"),
        ({"seed": 3}, "seed"),
    ],
)
def test_sft_refuses_to_resume_a_run_with_other_settings(tiny_dir, sft_file, tmp_path, change, named):
    out = tmp_path / "sft"
    cfg = _one_step_sft(tiny_dir, sft_file, out)
    first = sft.train(cfg)
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ResultsFolderError, match=named) as e:
        sft.train(sft.SFTConfig(**{**cfg.__dict__, "steps": 2, **change}))
    assert str(out) in str(e.value) and "--out" in str(e.value)
    # nothing of the old run is touched: its checkpoint is still the latest and its log unchanged
    assert latest_checkpoint(out) == first and (out / "metrics.jsonl").read_text() == before


def test_sft_resume_compares_the_data_by_content_not_by_path(tiny_dir, sft_file, tmp_path):
    out = tmp_path / "sft"
    data = tmp_path / "data.jsonl"
    data.write_bytes(sft_file.read_bytes())
    cfg = _one_step_sft(tiny_dir, data, out)
    sft.train(cfg)
    assert len(read_info(latest_checkpoint(out))["config"]["data_digest"]) == 16
    # the same file rewritten with other examples (a rerun of the recipe's data stage with other settings)
    lines = sft_file.read_text().splitlines()
    assert len(lines) == len(TASKS) > 1
    data.write_text("\n".join(reversed(lines)) + "\n")
    with pytest.raises(ResultsFolderError, match="data-digest"):
        sft.train(sft.SFTConfig(**{**cfg.__dict__, "steps": 2}))
    # the same examples at another path, with another speed setting: it continues
    moved = tmp_path / "moved.jsonl"
    moved.write_bytes(sft_file.read_bytes())
    again = sft.SFTConfig(**{**cfg.__dict__, "data": [str(moved)], "steps": 2, "micro_batch": 1, "threads": 1})
    assert sft.train(again).name == "step-000002"


def test_grpo_refuses_to_resume_a_run_with_other_settings(tiny_dir, tmp_path):
    out = tmp_path / "grpo"
    tasks = tmp_path / "tasks.jsonl"
    shipped = json.loads((Path(tau_env.__file__).parent / "domains" / "harbor_bank" / "tasks.json").read_text())
    [row] = [t for t in shipped if t["id"] == "travel_notice_simple"]
    tasks.write_text(json.dumps(row) + "\n", encoding="utf-8")
    cfg = grpo.GRPOConfig(
        model=str(tiny_dir), out=str(out), tasks=str(tasks), task_ids=["travel_notice_simple"], steps=1,
        tasks_per_step=1, group_size=2, max_steps=4, max_new_tokens=4, lora_rank=4, progress=False, retrieval="none",
    )  # fmt: skip
    first = grpo.train(cfg)
    for change, named in (({"lr": 1e-3}, "lr"), ({"group_size": 3}, "group-size"), ({"temperature": 0.5}, "temp")):
        with pytest.raises(ResultsFolderError, match=named):
            grpo.train(grpo.GRPOConfig(**{**cfg.__dict__, "steps": 2, **change}))
    row["scenario"]["requests"] = ["I'm travelling to Japan next week."]
    tasks.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(ResultsFolderError, match="tasks-digest"):
        grpo.train(grpo.GRPOConfig(**{**cfg.__dict__, "steps": 2}))
    assert latest_checkpoint(out) == first
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1]


@settings(max_examples=200, deadline=None)
@given(
    saved=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 2)),
    now=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 2)),
    free=st.sets(st.sampled_from("abcdef")),
)
def test_check_resume_refuses_exactly_a_shared_setting_outside_the_free_ones_that_differs(saved, now, free):
    differ = sorted(k for k in saved if k in now and k not in free and saved[k] != now[k])
    if not differ:
        check_resume("RUN", saved, now, free)
        return
    with pytest.raises(ResultsFolderError) as e:
        check_resume("RUN", saved, now, free)
    named = {part.split(":")[0] for part in str(e.value).split("(", 1)[1].split(");")[0].split("; ")}
    assert named == set(differ)


def test_a_malformed_saved_config_or_unencodable_data_gives_a_clear_answer():
    for saved in (["lr"], "lr", None, 3):
        with pytest.raises(ResultsFolderError, match="not a JSON object"):
            check_resume("RUN", saved, {"lr": 1.0}, ())
    # text no UTF-8 can carry (a lone surrogate) still has a digest, distinct from other text's
    assert content_digest({"text": "\ud800"}) != content_digest({"text": "\ud801"})
    assert content_digest(b"\xff\xfe") == content_digest(b"\xff\xfe") != content_digest(b"")


def test_one_grpo_step_on_real_rollouts(tiny_dir, tmp_path):
    out = tmp_path / "grpo"
    cfg = grpo.GRPOConfig(
        model=str(tiny_dir), out=str(out), task_ids=["travel_notice_simple"], steps=1, tasks_per_step=1,
        group_size=2, max_steps=4, max_new_tokens=6, lora_rank=4, skip_zero_signal=False, progress=False,
        retrieval="none",
    )  # fmt: skip
    path = grpo.train(cfg)
    assert path.name == "step-000001" and (path / INFO_FILE).is_file()
    [row] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["episodes"] == 2 and row["groups"] == 1 and row["agent_tokens"] > 0
    assert row["loss"] is not None and row["loss"] == row["loss"]  # finite (the group ran through grpo_loss)
    rollouts = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 and all(r["reward"] is not None for r in rollouts)
    assert read_info(path)["agent"]["retrieval"] == "none"
    # resume: a second run to 2 steps starts from the checkpoint (its step without the prefix's gradient)
    grpo.train(grpo.GRPOConfig(**{**cfg.__dict__, "steps": 2, "prefix_grad": False}))
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert [json.loads(x)["step"] for x in (out / "rollouts.jsonl").read_text().splitlines()] == [1, 1, 2, 2]


def test_grpo_gradient_reaches_only_agent_tokens(tiny_dir):
    model, tok = _tok_model(tiny_dir)
    add_lora(model, 4, 8.0)
    seq = tok.encode(
        "<|im_start|>system\nhello there<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    gen = tok.encode("ok then<|im_end|>")
    trajs = []
    for reward, extra in ((1.0, gen), (0.0, gen[:1] + gen)):
        ids = seq + extra + tok.encode("\n<|im_start|>user\nbye<|im_end|>")
        mask = [0] * len(seq) + [1] * len(extra) + [0] * (len(ids) - len(seq) - len(extra))
        trajs.append(TokenTrajectory("t", 0, ids, mask, [-1.0 * m for m in mask], reward))
    cfg = grpo.GRPOConfig(mask_delta=10.0, is_cap=100.0)
    logp, _ = grpo.group_logprobs(model, trajs, 2)
    logp.retain_grad()
    from tau_env.reference_trainers.objectives import grpo_loss

    width = logp.shape[1]
    mask = torch.tensor([t.agent_mask + [0] * (width - len(t.agent_mask)) for t in trajs])
    roll = torch.tensor([t.rollout_logprobs + [0.0] * (width - len(t.rollout_logprobs)) for t in trajs])
    loss, _ = grpo_loss(
        logp, logp.detach(), roll, torch.tensor([1.0, 0.0]), mask, mask_delta=cfg.mask_delta, is_cap=cfg.is_cap
    )
    loss.backward()
    assert torch.isfinite(loss) and loss.abs() > 0
    assert torch.equal(logp.grad != 0, mask.bool())
    full_loss, stats, _ = grpo.group_loss(model, trajs, cfg)
    assert torch.isfinite(full_loss) and stats["advantage_std"] > 0


def test_grpo_logprobs_equal_a_plain_forward_on_agent_tokens(tiny_dir):
    """group_logprobs (shared prefix, sequences cut after their last agent token) gives each agent token
    the log-probability a plain forward pass over the whole sequence gives it."""
    from tau_env.reference_trainers.objectives import token_logprobs

    model, tok = _tok_model(tiny_dir)
    seq = tok.encode(
        "<|im_start|>system\nhello there, this is a shared prompt<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    trajs = []
    for gen, tail in (("ok then", "\n<|im_start|>user\nbye now, and a long reply after it<|im_end|>"), ("no", "")):
        extra = tok.encode(gen + "<|im_end|>")
        ids = seq + extra + tok.encode(tail)
        mask = [0] * len(seq) + [1] * len(extra) + [0] * (len(ids) - len(seq) - len(extra))
        trajs.append(TokenTrajectory("t", 0, ids, mask, [0.0] * len(ids), 1.0))
    with torch.no_grad():
        logp, _ = grpo.group_logprobs(model, trajs, 1)
        for row, t in zip(logp, trajs):
            want = token_logprobs(model(torch.tensor([t.input_ids])).logits.float(), torch.tensor([t.input_ids]))[0]
            on = torch.tensor(t.agent_mask, dtype=torch.bool)
            assert torch.allclose(row[: len(t.input_ids)][on], want[on], atol=1e-4)
            last = max(k for k, m in enumerate(t.agent_mask) if m)
            assert not row[last + 1 :].any()  # nothing computed for the env's messages after the last turn


def test_eval_plays_a_checkpoint_in_process(tiny_dir, sft_file, tmp_path):
    from tau_env.cli import main

    path = sft.train(
        sft.SFTConfig(
            model=str(tiny_dir), data=[str(sft_file)], out=str(tmp_path / "sft"), steps=1, batch_size=1,
            micro_batch=1, lora_rank=4, retrieval="none", max_new_tokens=6, progress=False,
        )
    )  # fmt: skip
    env = tau_env.make(ENV)
    tasks = tmp_path / "tasks.json"
    tau_env.save_tasks([t for t in env.domain.tasks if t.id == "found_card_unlock"], tasks)
    out = tmp_path / "eval"
    argv = ["eval", "--agent-checkpoint", str(path), "--tasks", str(tasks), "--max-steps", "4", "--out", str(out)]
    code = main([*argv, "--quiet"])
    assert code == 0
    records = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in records] == ["found_card_unlock"]
    config = json.loads((out / "config.json").read_text())
    assert "checkpoint" in json.dumps(config)


def test_eval_refuses_a_folder_that_is_no_checkpoint(tmp_path, capsys):
    from tau_env.cli import main

    assert main(["eval", "--agent-checkpoint", str(tmp_path), "--out", str(tmp_path / "o")]) != 0
    assert "checkpoint" in capsys.readouterr().err


def _fake_checkpoint(run: Path, step: int) -> Path:
    folder = run / "checkpoints" / f"step-{step:06d}"
    folder.mkdir(parents=True)
    (folder / INFO_FILE).write_text(json.dumps({"step": step}))
    return folder


def test_a_run_folder_resolves_to_its_latest_complete_checkpoint(tmp_path):
    run = tmp_path / "run"
    first, second = _fake_checkpoint(run, 1), _fake_checkpoint(run, 2)
    (run / "checkpoints" / ".tmp-step-000003").mkdir()  # a save killed half-way is never picked
    (run / "checkpoints" / "step-000004").mkdir()  # nor a folder without its record
    assert resolve_checkpoint(first) == first  # a checkpoint is itself
    assert resolve_checkpoint(run) == second  # no marker: the newest complete one
    (run / "latest").write_text(first.name + "\n")
    assert resolve_checkpoint(run) == first  # the marker wins: it names what the trainer finished last
    (run / "latest").write_text("step-000004\n")  # a marker naming an incomplete folder: the newest complete one
    assert resolve_checkpoint(run) == second
    assert find_checkpoint(tmp_path) is None and find_checkpoint(tmp_path / "missing") is None
    for bad, said in ((tmp_path, "nor a trainer run"), (tmp_path / "missing", "is no folder")):
        with pytest.raises(ResultsFolderError, match=said):
            resolve_checkpoint(bad)
    young = tmp_path / "young"  # a run still before its first save: its log, an unfinished checkpoint
    (young / "checkpoints" / ".tmp-step-000005").mkdir(parents=True)
    (young / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ResultsFolderError, match="is a trainer run with no complete checkpoint yet"):
        resolve_checkpoint(young)


def test_eval_and_the_trainers_take_a_run_folder_for_its_latest_checkpoint(tiny_dir, sft_file, tmp_path):
    from tau_env.cli import main

    def train(out: Path, model: Path, steps: int) -> Path:
        return sft.train(
            sft.SFTConfig(
                model=str(model), data=[str(sft_file)], out=str(out), steps=steps, batch_size=1, micro_batch=1,
                lora_rank=4, retrieval="none", max_new_tokens=4, progress=False,
            )
        )  # fmt: skip

    run = tmp_path / "sft"
    last = train(run, tiny_dir, 2)
    assert last.name == "step-000002"
    outs = {}
    for name, where in (("run", run), ("step", last)):
        outs[name] = tmp_path / f"eval-{name}"
        argv = ["eval", "--agent-checkpoint", str(where), "--task", "found_card_unlock", "--max-steps", "3"]
        assert main([*argv, "--quiet", "--out", str(outs[name])]) == 0
    configs = [json.loads((outs[n] / "config.json").read_text()) for n in ("run", "step")]
    assert configs[0]["agent_checkpoint"] == configs[1]["agent_checkpoint"]
    assert configs[0]["agent_checkpoint"]["step"] == 2
    assert configs[0]["agent_checkpoint_path"] == configs[1]["agent_checkpoint_path"] == str(last)
    trajectories = [(outs[n] / "trajectories.jsonl").read_text() for n in ("run", "step")]
    events = [[json.loads(x)["events"] for x in t.splitlines()] for t in trajectories]
    assert events[0] == events[1]  # the same model and seed: the same episode
    # SFT and GRPO go on from a run folder with its latest checkpoint's weights and template
    a = load_checkpoint(train(tmp_path / "from-run", run, 1)).model.state_dict()
    b = load_checkpoint(train(tmp_path / "from-step", last, 1)).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(InvalidOptionError, match="not a model folder"):
        train(tmp_path / "from-nothing", tmp_path / "eval-run", 1)


def test_svg_plot_draws_each_metric(tmp_path):
    rows = [{"step": i, "loss": 1.0 / i, "reward": None} for i in range(1, 5)]
    svg = svg_plot(rows, ["loss", "reward"], tmp_path / "m.svg").read_text()
    assert svg.count("<polyline") == 1 and ">loss<" in svg and ">reward<" in svg


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.fixed_dictionaries(
            {"step": st.integers(0, 50)},
            optional={
                "a<b&c": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3))
            },
        ),
        max_size=12,
    ),
    title=st.text(max_size=12),
)
def test_svg_plot_is_valid_xml_with_finite_coordinates_for_any_rows(tmp_path_factory, rows, title):
    """Any key or title (escaped), any values (huge, NaN, missing), steps repeated or out of order: valid
    XML; every coordinate finite; a step logged twice drawn once, its last value; points in step order."""
    import re
    import xml.etree.ElementTree as ET

    path = svg_plot(rows, ["a<b&c"], tmp_path_factory.mktemp("svg") / "m.svg", title)
    root = ET.parse(path).getroot()
    text = path.read_text()
    assert "nan" not in text and "inf" not in text.replace("font-", "")
    ns = "{http://www.w3.org/2000/svg}"
    last = {}
    for r in rows:
        v = r.get("a<b&c")
        if isinstance(v, float) and math.isfinite(v):
            last[r["step"]] = v
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == (1 if last else 0)
    if last:
        xs = [float(pt.split(",")[0]) for pt in lines[0].get("points").split()]
        assert len(xs) == len(last) and xs == sorted(xs)
    assert not re.search(r'="-?nan"', text)


def test_svg_plot_of_one_point_labels_only_what_happened(tmp_path):
    svg = svg_plot([{"step": 1, "loss": 2.0}], ["loss"], tmp_path / "one.svg").read_text()
    assert ">step 1<" in svg and ">2<" in svg and ">3<" not in svg and ">2</text><text" not in svg.split("step 1")[1]


def test_reused_prefix_generation_equals_plain_generation(tiny_dir, examples):
    from tau_env.llm.local import ReusedPrefixModel

    model, tok = _tok_model(tiny_dir)
    model.eval()
    reuse = ReusedPrefixModel(model, slots=2, min_reuse=4)
    msgs = examples[0]["messages"]
    for k in (3, 5, 7, 3):  # growing prompts of one episode, then the start again
        text = tok.apply_chat_template(msgs[:k], tools=examples[0]["tools"], add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tok.encode(text)])
        kw = dict(max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
        with torch.no_grad():
            plain = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
            cached = reuse.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        assert cached.tolist() == plain.tolist()
    assert reuse.reused_tokens > reuse.computed_tokens  # most of each prompt came from a cache


@pytest.mark.parametrize("trainer", [sft, grpo])
def test_command_line_help_and_flags(trainer, capsys):
    with pytest.raises(SystemExit) as e:
        trainer.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "--lora-rank" in text and "--out" in text and "(default:" in text
    from tau_env.reference_trainers.cpu_common import parse_config

    cls = sft.SFTConfig if trainer is sft else grpo.GRPOConfig
    cfg = parse_config(cls, ["--model", "m", "--lora-rank", "0", "--no-progress"], "")
    assert cfg.model == "m" and cfg.lora_rank == 0 and cfg.progress is False and cfg.prefix_grad is True
    assert parse_config(cls, ["--no-prefix-grad"], "").prefix_grad is False
    if trainer is sft:
        assert parse_config(cls, ["--data", "a.jsonl", "b"], "").data == ["a.jsonl", "b"]


def test_a_starting_model_becomes_a_step_0_checkpoint_evaluated_like_the_others(tiny_dir, tmp_path):
    from tau_env.reference_trainers.checkpoint import base_checkpoint
    from tau_env.reference_trainers.cpu_common import chat_template_for, tokenizer_family

    from tau_env.cli import main

    path = base_checkpoint(tiny_dir, tmp_path / "base", retrieval="none", max_new_tokens=4)
    info = read_info(path)
    assert path.name == "step-000000" and info["trainer"] == "base" and info["step"] == 0
    assert info["agent"]["retrieval"] == "none" and info["agent"]["max_new_tokens"] == 4
    assert base_checkpoint(tiny_dir, tmp_path / "base") == path  # reused
    model, tok = _tok_model(tiny_dir)
    ckpt = load_checkpoint(path)
    assert ckpt.chat_template == chat_template_for(tok, tokenizer_family(tok))
    ids = torch.tensor([tok.encode("<|im_start|>user\nhello<|im_end|>")])
    with torch.no_grad():
        torch.testing.assert_close(ckpt.model(ids).logits, model(ids).logits)
    out = tmp_path / "eval"
    args = ["eval", "--agent-checkpoint", str(path), "--task", "found_card_unlock", "--max-steps", "3"]
    assert main([*args, "--quiet", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["agent_checkpoint"]["trainer"] == "base" and config["agent_checkpoint"]["step"] == 0


def test_lora_on_the_top_blocks_only_leaves_the_blocks_below_out_of_autograd(tiny_dir, examples):
    from tau_env.reference_trainers.cpu_common import lora_names

    model, tok = _tok_model(tiny_dir)
    assert {n.split(".")[2] for n in lora_names(model, layers=1)} == {"1"}
    assert len(lora_names(model, layers=0)) == 2 * len(lora_names(model, layers=1))
    add_lora(model, 4, 8.0, layers=1)
    wrapped = [n for n, m in model.named_modules() if isinstance(m, LoRALinear)]
    assert wrapped and all(".layers.1." in n for n in wrapped)
    needs_grad = {}
    for i, block in enumerate(model.model.layers):
        block.register_forward_hook(lambda mod, args, out, i=i: needs_grad.__setitem__(i, out[0].requires_grad))
    sample = tokenize_sft_example(tok, examples[0], tok.chat_template)
    loss, _ = sft.micro_step(model, [sample], sum(sample.loss_mask))
    assert needs_grad == {0: False, 1: True} and loss > 0
    assert all(m.lora_A.grad is not None for m in model.modules() if isinstance(m, LoRALinear))
    with pytest.raises(InvalidOptionError, match="decoder blocks"):
        lora_names(torch.nn.Sequential(torch.nn.Linear(2, 2)), targets=("0",), layers=1)


def test_turn_prefix_copies_are_exact_cuts_after_each_trained_turn(tiny_dir, examples, sft_file, tmp_path):
    from tau_env.reference_trainers.cpu_common import turn_prefixes

    _, tok = _tok_model(tiny_dir)
    sample = tokenize_sft_example(tok, examples[0], tok.chat_template)
    turns = sum(1 for t in range(1, len(sample.loss_mask)) if sample.loss_mask[t - 1] and not sample.loss_mask[t])
    cuts = turn_prefixes(sample, 3)
    assert len(cuts) == min(3, turns) and [len(c.input_ids) for c in cuts] == sorted({len(c.input_ids) for c in cuts})
    for k, c in enumerate(cuts, 1):
        assert (
            c.input_ids == sample.input_ids[: len(c.input_ids)] and c.loss_mask == sample.loss_mask[: len(c.input_ids)]
        )
        runs = sum(1 for t in range(len(c.loss_mask)) if c.loss_mask[t] and (t == 0 or not c.loss_mask[t - 1]))
        # k whole trained turns, the last one through its end-of-turn token, where the full sample's turn ends
        assert runs == k and c.loss_mask[-1] == 1 and sample.loss_mask[len(c.input_ids)] == 0
        assert tok.decode(c.input_ids[-1:]) == "<|im_end|>"
    assert turn_prefixes(sample, 0) == [] and len(turn_prefixes(sample, 10_000)) == turns - 1
    # SFT trains on them too: one epoch of batch 1 is the examples plus their copies
    path = sft.train(
        sft.SFTConfig(
            model=str(tiny_dir), data=[str(sft_file)], out=str(tmp_path / "sft"), epochs=1.0, batch_size=1,
            micro_batch=1, lora_rank=4, lora_layers=1, turn_prefixes=2, progress=False,
        )
    )  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(examples) * 3 and read_info(path)["lora"]["layers"] == 1
    resumed = load_checkpoint(path, for_training=True).model
    assert {n for n, m in resumed.named_modules() if isinstance(m, LoRALinear)} == {
        n for n in lora_names_of(tiny_dir, 1)
    }


def lora_names_of(tiny_dir, layers):
    from tau_env.reference_trainers.cpu_common import lora_names

    model, _ = _tok_model(tiny_dir)
    return lora_names(model, layers=layers)
