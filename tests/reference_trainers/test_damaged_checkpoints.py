"""A checkpoint folder damaged on disk (a file missing, cut short, overwritten, its records edited):
``tau-env eval --agent-checkpoint``, the trainers' resume and ``starting_model`` say which folder
and which file in one line (exit 2 from the command line), and write nothing; a damage that does not
matter to what is asked (no resume state, for an evaluation) still plays.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import sft  # noqa: E402
from tau_env.reference_trainers.checkpoint import (  # noqa: E402
    INFO_FILE,
    STATE_FILE,
    info_problem,
    load_checkpoint,
    read_info,
)

from tau_env.error import InvalidOptionError, ResultsFolderError  # noqa: E402


def _copy(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest)
    return dest / "checkpoints" / "step-000001"


DAMAGES = {
    "weights missing": ("model.safetensors", None),
    "weights empty": ("model.safetensors", b""),
    "weights cut short": ("model.safetensors", "cut"),
    "weights overwritten": ("model.safetensors", b"\x00\x01garbage" * 50),
    "tokenizer missing": ("tokenizer.json", None),
    "config overwritten": ("config.json", b'{"model_type": "llama", "hidden_size": "wide"}'),
    "records cut short": (INFO_FILE, b'{"step": '),
    "records not UTF-8": (INFO_FILE, b"\xff\xfe\x00{}"),
    "records a list": (INFO_FILE, b"[1, 2]"),
    # a template that does not parse, and one that parses but fails on a message (a raw jinja2 traceback
    # in the middle of the first episode, after the results folder was made)
    "template cut short": ("chat_template.jinja", b"{% for m in messages %}{{ m.content }}{% endfor"),
    "template fails to render": ("chat_template.jinja", b"{% for m in messages %}{{ m.nope.x }}{% endfor %}"),
}


def _damage(ckpt: Path, name: str, how) -> None:
    f = ckpt / name
    if how is None:
        f.unlink()
    elif how == "cut":
        f.write_bytes(f.read_bytes()[:1000])
    else:
        f.write_bytes(how)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_eval_names_the_damaged_checkpoint_in_one_line_and_writes_nothing(sft_run, tmp_path, capsys, damage):
    from tau_env.cli import main

    ckpt = _copy(sft_run[0], tmp_path / "run")
    _damage(ckpt, *DAMAGES[damage])
    out = tmp_path / "eval"
    code = main(["eval", "--agent-checkpoint", str(tmp_path / "run"), "--task", "found_card_unlock", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"tau-env: {ckpt}") and ("damaged" in err[-1] or "missing" in err[-1])
    assert DAMAGES[damage][0] in err[-1] or "tokenizer" in err[-1]  # which file
    assert not out.exists()


def test_a_tokenizer_larger_than_the_models_embedding_is_refused_when_it_loads(sft_run, tmp_path, capsys):
    # a checkpoint put together from two models: ids past the embedding were an IndexError mid-episode
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    from tau_env.cli import main

    ckpt = _copy(sft_run[0], tmp_path / "run")
    small = build_tiny_model(tmp_path / "small", ["card lost found unlock"] * 20, vocab_size=120)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(small / name, ckpt / name)
    out = tmp_path / "eval"
    code = main(["eval", "--agent-checkpoint", str(ckpt), "--task", "found_card_unlock", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err) and not out.exists()
    assert err[-1].startswith(f"tau-env: {ckpt}: its tokenizer has ") and "but its model embeds only" in err[-1]
    with pytest.raises(InvalidOptionError, match="the tokenizer and the weights are two models'"):
        load_checkpoint(ckpt)


def test_a_resume_whose_state_is_damaged_is_refused_and_nothing_is_lost(sft_run, tmp_path):
    ckpt = _copy(sft_run[0], tmp_path / "run")
    (ckpt / STATE_FILE).write_bytes((ckpt / STATE_FILE).read_bytes()[:500])
    before = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    cfg = sft.SFTConfig(
        model="unused", data=[str(sft_run[1])], out=str(tmp_path / "run"), steps=2, batch_size=1, micro_batch=1,
        lora_rank=4, retrieval="none", max_new_tokens=4, progress=False, device="cpu",
    )  # fmt: skip
    with pytest.raises(ResultsFolderError, match=f"{STATE_FILE}: the run's resume state does not load"):
        sft.train(cfg)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == before
    # for an evaluation the resume state is not needed: it loads
    assert load_checkpoint(ckpt).step == 1


def test_a_starting_model_that_is_a_damaged_checkpoint_is_named(sft_run, tmp_path):
    from tau_env.reference_trainers.checkpoint import starting_model

    ckpt = _copy(sft_run[0], tmp_path / "run")
    _damage(ckpt, "model.safetensors", "cut")
    with pytest.raises(InvalidOptionError, match=r"its weights do not load \(.*model\.safetensors"):
        starting_model(ckpt)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FIELDS = ("family", "step", "agent", "lora")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS + ("agent.max_new_tokens", "agent.max_steps", "agent.retrieval")), value=JSON)
def test_any_edit_to_the_records_is_read_or_named(sft_run, tmp_path_factory, field, value):
    """The fields a checkpoint's record is read for, set to any JSON: the record is accepted only
    when every field read from it has its type; else one ResultsFolderError naming the file."""
    ckpt = sft_run[0] / "checkpoints" / "step-000001"
    info = json.loads((ckpt / INFO_FILE).read_text(encoding="utf-8"))
    key, _, sub = field.partition(".")
    if sub:
        info[key] = {**info["agent"], sub: value}
    else:
        info[key] = value
    folder = tmp_path_factory.mktemp("info")
    (folder / INFO_FILE).write_text(json.dumps(info), encoding="utf-8")
    problem = info_problem(info)
    if problem is None:
        got = read_info(folder)
        assert got["family"] in ("qwen", "smollm2", "hermes")
        agent = got.get("agent") or {}
        for k in ("max_new_tokens", "max_steps"):
            assert agent.get(k) is None or (type(agent[k]) is int and agent[k] >= 1)
        if got.get("lora"):
            int(got["lora"]["rank"]), float(got["lora"]["alpha"]), tuple(got["lora"]["targets"])
    else:
        with pytest.raises(ResultsFolderError, match=rf"{INFO_FILE} is damaged: "):
            read_info(folder)
