"""What the CPU trainers do with bad input: settings out of range, SFT files that are not SFT data,
folders that are not models. Each gives one clear error naming the flag, file and line, on the
command line one ``PROG: error: ...`` line and exit status 2, and nothing is read half-way or written.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import grpo, sft  # noqa: E402
from tau_env.reference_trainers.cpu_common import read_sft_jsonl, sft_example_problem  # noqa: E402

import tau_env  # noqa: E402
from tau_env.error import InvalidOptionError, ResultsFolderError  # noqa: E402
from tau_env.sft import to_example  # noqa: E402

# (field, a value the trainer takes, values it refuses): the ranges the --help texts promise
SFT_RANGES = [
    ("steps", 0, [-1, 1.5]),
    ("epochs", 0.25, [0, -1.0, math.inf]),
    ("batch_size", 1, [0, -4]),
    ("micro_batch", 1, [0]),
    ("lr", 1e-4, [0.0, -1e-4, math.nan, math.inf]),
    ("warmup_steps", 0, [-1]),
    ("weight_decay", 0.0, [-0.1, math.nan]),
    ("grad_clip", 0.0, [-1.0]),
    ("max_len", 1, [0]),
    ("turn_prefixes", 0, [-1]),
    ("lora_rank", 0, [-1, 2.0]),
    ("lora_alpha", 0.5, [0.0, -1.0]),
    ("lora_layers", 0, [-2]),
    ("max_new_tokens", 1, [0]),
    ("save_every", 0, [-1]),
    ("threads", 0, [-1, 100_000]),  # 100,000 threads crashed the process in BLAS
    ("seed", -(2**63), [0.5, 2**63, -(2**63) - 1]),  # what eval's --seed takes
]
GRPO_RANGES = [
    ("steps", 1, [0, -1]),
    ("max_steps", 1, [0]),
    ("tasks_per_step", 1, [0]),
    ("group_size", 2, [1, 0]),
    ("temperature", 0.0, [-0.5, math.nan]),
    ("max_new_tokens", 1, [0]),
    ("max_context", 1, [0]),
    ("lr", 2e-6, [0.0, math.inf]),
    ("clip_eps", 0.5, [0.0, 1.0, 1.5]),
    ("is_cap", 0.5, [0.0, -2.0]),
    ("mask_delta", 0.0, [-0.1, math.nan]),
    ("micro_batch", 1, [0]),
    ("concurrency", 1, [0]),
    ("save_every", 0, [-1]),
    ("lora_rank", 0, [-1]),
    ("server_timeout", 0.5, [0.0, -1.0, math.nan]),
    ("max_failed_fraction", 0.0, [-0.1, 1.5, math.nan]),
    ("threads", 0, [-1, 100_000]),
    ("seed", 2**63 - 1, [2**63, 10**23]),
]


@pytest.mark.parametrize(
    "cls, name, good, bads",
    [(sft.SFTConfig, *r) for r in SFT_RANGES] + [(grpo.GRPOConfig, *r) for r in GRPO_RANGES],
)
def test_each_setting_takes_its_range_and_refuses_the_rest_by_its_flag(cls, name, good, bads):
    assert getattr(cls(**{name: good}), name) == good
    flag = "--" + name.replace("_", "-")
    for bad in bads:
        with pytest.raises(InvalidOptionError, match=f"^{flag} must be"):
            cls(**{name: bad})


NUMERIC = {
    cls: [f.name for f in fields(cls) if f.type in ("int", "float", int, float)]
    for cls in (sft.SFTConfig, grpo.GRPOConfig)
}


@settings(max_examples=300, deadline=None)
@given(
    cls=st.sampled_from([sft.SFTConfig, grpo.GRPOConfig]),
    data=st.data(),
    value=st.one_of(
        st.integers(-(10**6), 10**6),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    ),
)
def test_a_numeric_setting_is_a_finite_number_of_its_kind_or_refused(cls, data, value):
    name = data.draw(st.sampled_from(NUMERIC[cls]))
    try:
        cfg = cls(**{name: value})
    except InvalidOptionError as e:
        assert str(e).startswith("--" + name.replace("_", "-") + " must be")
        return
    got = getattr(cfg, name)
    assert not isinstance(got, bool) and isinstance(got, (int, float)) and math.isfinite(got)
    if dict((f.name, f.type) for f in fields(cls))[name] in ("int", int):
        assert isinstance(got, int)


def test_the_family_is_one_the_rollout_knows():
    assert sft.SFTConfig(family="qwen").family == "qwen" and grpo.GRPOConfig(family="").family == ""
    for cls in (sft.SFTConfig, grpo.GRPOConfig):
        with pytest.raises(InvalidOptionError, match="--family must be one of"):
            cls(family="llama")


# ------------------------------------------------------------------------------------ SFT files


@pytest.fixture(scope="module")
def example() -> dict:
    run = tau_env.evaluate(
        "harbor-bank-v0", tau_env.OracleAgent, tau_env.ScriptedUser, task_ids=["found_card_unlock"], retrieval="none"
    )
    ex = to_example(run.results[0].to_dict())
    assert sft_example_problem(ex) == ""
    return ex


JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    key=st.sampled_from(["messages", "train", "tools", None]),
    value=JSON,
    at=st.integers(0, 2),
    raw=st.one_of(st.none(), st.sampled_from(["{", "not json", "[1, 2", '{"messages": }', "\x00"])),
)
def test_a_bad_line_is_named_by_file_and_line_and_good_lines_read_as_written(
    tmp_path_factory, example, data, key, value, at, raw
):
    bad = dict(example)
    if key is None:
        bad = value
    elif key == "messages" and isinstance(value, list) and example["messages"]:
        bad["messages"] = [value[0] if value else 3, *example["messages"][1:]]  # one message broken
    else:
        bad[key] = value
    lines = [json.dumps(example)] * 3
    lines[at] = raw if raw is not None else json.dumps(bad)
    path = tmp_path_factory.mktemp("sft") / "data.jsonl"
    text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    try:
        got = read_sft_jsonl([path])
    except ResultsFolderError as e:
        assert f"{path}:{at + 1} " in str(e)
        assert path.read_text(encoding="utf-8") == text  # the file is untouched
        return
    # taken: then the line is a well-formed example, and every line reads back as it was written
    assert raw is None and sft_example_problem(bad) == ""
    assert got == [json.loads(x) for x in lines]


def test_a_file_that_is_no_utf8_text_is_refused_by_name(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"messages": "\xff"}\n')
    with pytest.raises(ResultsFolderError, match="not UTF-8"):
        read_sft_jsonl([path])


# --------------------------------------------------------------------------------- command lines


def _no_traceback(err: str, prog: str) -> None:
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"{prog}: error: ")


@pytest.mark.parametrize("trainer", [sft, grpo])
def test_a_flag_out_of_range_is_a_usage_error(trainer, capsys):
    with pytest.raises(SystemExit) as e:
        trainer.main(["--model", "m", "--lr", "nan"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--lr must be a number more than 0, not nan" in err and "Traceback" not in err


def test_a_folder_that_is_no_model_gives_one_error_line(tmp_path, capsys, example):
    prog = "python -m tau_env.reference_trainers.sft"
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(example) + "\n", encoding="utf-8")
    not_a_model = tmp_path / "results"
    not_a_model.mkdir()
    (not_a_model / "config.json").write_text('{"agent": "oracle"}')  # what a tau-env eval folder holds
    cases = [
        (["--model", str(not_a_model), "--data", str(data)], "names no model_type"),
        (["--model", str(tmp_path / "none"), "--data", str(data)], "not a model folder"),
    ]
    for argv, said in cases:
        out = tmp_path / f"out{len(said)}"
        assert sft.main([*argv, "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        _no_traceback(err, prog)
        assert said in err
        assert not (out / "checkpoints").exists()


def test_bad_data_is_named_before_training_starts(tmp_path, capsys, example):
    from tau_env.reference_trainers.cpu_common import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny", [json.dumps(example)] * 3)
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(example) + "\nnot json\n", encoding="utf-8")
    out = tmp_path / "out"
    assert sft.main(["--model", str(model), "--data", str(data), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    _no_traceback(err, "python -m tau_env.reference_trainers.sft")
    assert f"{data}:2 is not JSON" in err
    assert not (out / "checkpoints").exists() and not (out / "latest").exists()


def test_a_lone_surrogate_is_named_by_file_and_line(tmp_path, example):
    """Valid JSON (an escape) but no text: the tokenizer failed with a TypeError mid-run."""
    bad = json.loads(json.dumps(example))
    bad["messages"][-1]["content"] = "fine \ud800 then"
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(example) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    said = rf"{path}:2 is not an SFT example \(it holds a lone surrogate \(\\ud800\)"
    with pytest.raises(ResultsFolderError, match=said):
        read_sft_jsonl([path])


def test_an_env_or_retrieval_sft_would_record_but_nothing_can_play_is_refused_first(tmp_path, capsys, example):
    """SFT records --domain and --retrieval for eval and GRPO: a wrong one failed only there, after training."""
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(example) + "\n", encoding="utf-8")
    for flag, value, said in (("--retrieval", "bogus", "Unknown retrieval configuration 'bogus'"),
                              ("--domain", "bogus-v0", "No environment 'bogus-v0'")):  # fmt: skip
        out = tmp_path / value
        argv = ["--model", str(tmp_path / "none"), "--data", str(data), "--out", str(out), flag, value]
        assert sft.main([*argv, "--no-progress"]) == 2
        err = capsys.readouterr().err
        _no_traceback(err, "python -m tau_env.reference_trainers.sft")
        assert said in err and not out.exists()


def test_the_env_check_builds_nothing_and_checks_what_it_can(monkeypatch):
    """SFT only records --domain and --retrieval: no env, index or endpoint is built for the check."""
    from tau_env.reference_trainers.sft import check_env

    from tau_env.error import UnknownEnvError

    monkeypatch.delenv("TAU3_BANKING_DATA", raising=False)
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    check_env("tau3-banking", "qwen_embeddings")  # no data folder here: the name is left to eval and GRPO
    check_env("harbor-bank-v0", "dense")  # no embedding model is loaded
    with pytest.raises(InvalidOptionError, match="Unknown retrieval configuration 'bogus'"):
        check_env("harbor-bank-v0", "bogus")
    with pytest.raises(UnknownEnvError, match="harbor-bank-v0"):
        check_env("harbour-bank-v0", "")


def test_the_extreme_seeds_train(tiny_and_data, tmp_path):
    """Seeds derived from the run's (per step, episode and turn) stay in what torch and servers take."""
    model, data = tiny_and_data
    common = dict(model=str(model), steps=1, lora_rank=4, retrieval="none", progress=False, device="cpu")
    for seed in (-(2**63), 2**63 - 1):
        sft.train(sft.SFTConfig(**common, data=[str(data)], out=str(tmp_path / f"s{seed}"), batch_size=1, seed=seed))
        grpo.train(
            grpo.GRPOConfig(
                **common,
                out=str(tmp_path / f"g{seed}"),
                task_ids=["found_card_unlock"],
                tasks_per_step=1,
                group_size=2,
                max_steps=3,
                max_new_tokens=4,
                seed=seed,
            )  # fmt: skip
        )


def test_dagger_refuses_a_folder_that_is_no_checkpoint_in_one_line(tmp_path, capsys):
    from tau_env.reference_trainers import dagger

    assert dagger.main(["--checkpoint", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nor a trainer run" in err
    with pytest.raises(SystemExit) as e:
        dagger.main(["--checkpoint", str(tmp_path), "--out", str(tmp_path / "o"), "--temperature", "-1"])
    assert e.value.code == 2 and "--temperature must be" in capsys.readouterr().err


def test_huge_numbers_and_runs_that_would_never_end_are_refused(tmp_path, example):
    with pytest.raises(InvalidOptionError, match="--steps must be an integer"):
        sft.SFTConfig(steps=-(10**400))  # too big for a float: still a clear error
    assert sft.SFTConfig(steps=10**400).steps == 10**400  # in range; the run itself refuses it
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(example) + "\n", encoding="utf-8")
    # --epochs with a huge batch: one step of 3e8 examples (it hung drawing them; only --steps was checked)
    for kw in (
        {"steps": 10**400},
        {"epochs": 1e308},
        {"batch_size": 300_000_000},
        {"epochs": 0.5, "batch_size": 10**9},
    ):
        cfg = sft.SFTConfig(model=str(tmp_path / "none"), data=[str(data)], out=str(tmp_path / "o"), **kw)
        with pytest.raises(InvalidOptionError, match="ask for fewer"):
            sft.train(cfg)
    assert not (tmp_path / "o" / "checkpoints").exists()


def test_epochs_that_a_batch_overshoots_are_said(tiny_and_data, tmp_path, caplog):
    # --epochs 1 over a few examples at a batch larger than them trained several passes, unsaid
    model, data = tiny_and_data
    n = len(read_sft_jsonl([data]))
    cfg = sft.SFTConfig(
        model=str(model), data=[str(data)], out=str(tmp_path / "o"), epochs=1, batch_size=4 * n, micro_batch=1,
        lora_rank=2, retrieval="none", max_new_tokens=4, progress=False, device="cpu",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        sft.train(cfg)
    said = [r.getMessage() for r in caplog.records if "--epochs 1 over" in r.getMessage()]
    assert said and f"1 step(s) of {4 * n} draw 4 passes, not 1" in said[0]


def test_json_nested_too_deeply_is_a_bad_line_for_both_readers(tmp_path):
    from tau_env.reference_trainers import verl_data

    path = tmp_path / "data.jsonl"
    path.write_text("[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(ResultsFolderError, match=":1 is not JSON"):
        read_sft_jsonl([path])
    with pytest.raises(InvalidOptionError, match=":1: not JSON"):
        verl_data.read_sft_jsonl(path)
    path.write_bytes(b'{"messages": "\xff"}\n')
    with pytest.raises(InvalidOptionError, match="not UTF-8"):
        verl_data.read_sft_jsonl(path)


def test_a_latest_marker_that_is_not_ours_is_ignored(tmp_path):
    from tau_env.reference_trainers.checkpoint import find_checkpoint, latest_checkpoint

    run = tmp_path / "run"
    (run / "checkpoints" / "step-000001").mkdir(parents=True)
    (run / "checkpoints" / "step-000001" / "tau_env_trainer.json").write_text("{}")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "tau_env_trainer.json").write_text("{}")
    for marker in (b"../../elsewhere\n", b"\xff\xfe", b"", b"..\n"):
        (run / "latest").write_bytes(marker)
        assert latest_checkpoint(run) is None
        assert find_checkpoint(run) == run / "checkpoints" / "step-000001"


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory, example):
    from tau_env.reference_trainers.cpu_common import build_tiny_model, chat_template_for
    from transformers import AutoTokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("tok"), [json.dumps(example)] * 3, vocab_size=400)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return tok, chat_template_for(tok, "smollm2")


def _refused_by_line_or_trains(tmp_path_factory, example, bad, tiny_tokenizer) -> None:
    """A file of a good example, then ``bad``: refused naming line 2, or every example read tokenizes
    with a trained token (a left-out one is not read)."""
    from tau_env.reference_trainers.cpu_common import tokenize_sft_example

    path = tmp_path_factory.mktemp("sft") / "data.jsonl"
    path.write_text(json.dumps(example) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    try:
        got = read_sft_jsonl([path])
    except ResultsFolderError as e:
        assert f"{path}:2 " in str(e)
        return
    tok, template = tiny_tokenizer
    for ex in got:
        sample = tokenize_sft_example(tok, ex, template)
        assert len(sample.input_ids) == len(sample.loss_mask) and any(sample.loss_mask)


MESSAGE_FIELDS = ["role", "content", "tool_calls", "tool_call_id", "name"]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), field=st.sampled_from(MESSAGE_FIELDS), value=JSON, call_field=st.booleans())
def test_any_edit_to_a_message_is_refused_by_line_or_trains(
    tmp_path_factory, example, tiny_tokenizer, data, field, value, call_field
):
    """One field of one message (or of one of its tool calls) set to any JSON value: the file is
    refused with its file and line, or the example is left out with a warning, or it tokenizes as
    the rollout would render it. Never a template's or tokenizer's exception."""

    bad = json.loads(json.dumps(example))
    i = data.draw(st.integers(0, len(bad["messages"]) - 1))
    m = bad["messages"][i]
    if call_field and m.get("tool_calls"):
        call = m["tool_calls"][0]
        key = data.draw(st.sampled_from(["function", "name", "arguments", "id", "type"]))
        (call["function"] if key in ("name", "arguments") else call)[key] = value
    else:
        m[field] = value
    _refused_by_line_or_trains(tmp_path_factory, example, bad, tiny_tokenizer)


@settings(max_examples=300, deadline=None)
@given(
    turns=st.lists(
        st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(max_size=8), st.booleans()),
        min_size=1,
        max_size=6,
    )
)
def test_any_order_of_messages_and_train_flags_is_refused_by_line_or_trains(
    tmp_path_factory, example, tiny_tokenizer, turns
):
    """Messages of any roles in any order, any of them flagged trained (an example whose first
    message is a trained assistant turn raised the template's "empty conversation" ValueError): the
    file is refused by file and line, the example is left out, or it tokenizes with a trained token."""

    messages = []
    for n, (role, text, _) in enumerate(turns):
        m = {"role": role, "content": text}
        if role == "tool":
            m.update(tool_call_id=f"call_{n}", name="get_card")
        messages.append(m)
    bad = {"task_id": "t", "messages": messages, "tools": [], "train": [int(t) for *_, t in turns]}
    _refused_by_line_or_trains(tmp_path_factory, example, bad, tiny_tokenizer)


def test_an_empty_file_and_examples_that_teach_nothing_are_said(tmp_path, example, caplog):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ResultsFolderError, match=f"{empty} holds no SFT example"):
        read_sft_jsonl([empty])
    untrained = {**example, "train": [False] * len(example["messages"])}
    broken = json.loads(json.dumps(example))
    k = next(j for j, m in enumerate(broken["messages"]) if m.get("tool_calls") and broken["train"][j])
    broken["messages"][k]["tool_calls"][0]["function"]["arguments"] = "{not json"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(x) + "\n" for x in (untrained, example, broken)), encoding="utf-8")
    with caplog.at_level("WARNING"):
        assert read_sft_jsonl([mixed]) == [example]
    assert "left out 2 SFT example(s)" in caplog.text and f"{mixed}:1 (no trained assistant turn)" in caplog.text
    only = tmp_path / "only.jsonl"
    only.write_text(json.dumps(broken) + "\n", encoding="utf-8")
    with pytest.raises(
        ResultsFolderError, match=rf"No SFT example can be trained: 1 left out, the first {only}:1 \(a trained call"
    ):
        read_sft_jsonl([only])


def test_text_with_unicode_line_separators_reads_as_one_line(tmp_path, example):
    """export-sft writes U+2028 and U+0085 raw (ensure_ascii=False): they are text, not line breaks."""
    odd = json.loads(json.dumps(example))
    next(m for m in odd["messages"] if m["role"] == "user")["content"] += " a\u2028b\x85c"
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps(odd, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_sft_jsonl([path]) == [odd]


_WITHOUT = """
import runpy, sys
for name in {blocked!r}:
    sys.modules[name] = None  # `import name` raises ImportError, as where the extra is not installed
sys.argv = ["prog", *{argv!r}]
runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("module", "blocked", "argv", "said"),
    [
        ("sft", ["torch"], ["--help"], "needs the 'train' extra (torch not installed)"),
        ("grpo", ["torch"], ["--model", "M"], "needs the 'train' extra (torch not installed)"),
        ("dagger", ["transformers"], ["--checkpoint", "C", "--out", "O"], "needs the 'train' extra (transformers"),
        ("verl_data", ["pyarrow"], ["rl", "harbor-bank-v0", "out.parquet"], "writing parquet needs pyarrow"),
    ],
)
def test_a_command_without_its_extra_says_so_in_one_line(tmp_path, module, blocked, argv, said):
    import subprocess
    import sys

    code = _WITHOUT.format(blocked=blocked, argv=argv, module=f"tau_env.reference_trainers.{module}")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and said in done.stderr.strip().splitlines()[-1]
    assert not list(tmp_path.iterdir())  # nothing written


def test_importing_a_trainer_without_its_extra_is_an_import_error(monkeypatch):
    import importlib
    import sys

    from tau_env.error import DependencyNotInstalled

    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "tau_env.reference_trainers._train_extra", raising=False)
    monkeypatch.delitem(sys.modules, "tau_env.reference_trainers.sft", raising=False)
    with pytest.raises(DependencyNotInstalled, match="'train' extra"):
        importlib.import_module("tau_env.reference_trainers.sft")


@pytest.mark.parametrize("trainer", [sft, grpo])
def test_ctrl_c_is_one_line(trainer, monkeypatch, capsys):
    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "train", interrupted)
    assert trainer.main(["--model", "M", "--out", "unused"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"python -m {trainer.__name__}: interrupted; what it saved stays in its --out (the command without "
        "--no-resume resumes from there)"
    ]


def test_the_sft_launcher_says_a_python_without_verl_once(tmp_path):
    """sft_single_node.sh with a Python that lacks veRL: one line before torchrun (which would start a
    failing process per GPU)."""
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("veRL is installed in this Python")
    script = Path(sft.__file__).resolve().parent / "launch" / "sft_single_node.sh"
    env = {**os.environ, "MODEL": str(tmp_path), "TRAIN": str(tmp_path / "t.parquet"), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"sft_single_node.sh: {sys.executable} cannot import veRL's SFT trainer and tau-env (")
    assert "No module named 'verl'" in line and "set PYTHON" in line


def test_a_package_that_is_installed_but_broken_is_said_as_such(tmp_path):
    """transformers present but failing on import (a clash among its own dependencies): its own error,
    not advice to install the extra that is installed."""
    import subprocess
    import sys

    shadow = tmp_path / "shadow" / "transformers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("import huggingface_hub_that_is_not_there  # noqa\n")
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(shadow.parent)!r}); sys.argv = ['prog', '--help']\n"
        "runpy.run_module('tau_env.reference_trainers.sft', run_name='__main__', alter_sys=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "transformers is installed but does not import" in last and "huggingface_hub_that_is_not_there" in last


def test_a_huge_example_is_left_out_without_tokenizing_it(tiny_and_data, tmp_path, monkeypatch, caplog, example):
    """A 3M-character line took a minute and ~10 GB to tokenize before it was left out as too long."""
    model, data = tiny_and_data
    huge = json.loads(json.dumps(example))
    huge["messages"][1]["content"] = "word " * 600_000
    path = tmp_path / "data.jsonl"
    path.write_text(data.read_text() + json.dumps(huge) + "\n", encoding="utf-8")
    real = sft.tokenize_sft_example

    def tokenize(tokenizer, ex, template):
        assert len(json.dumps(ex)) < 1_000_000, "the huge example was tokenized"
        return real(tokenizer, ex, template)

    monkeypatch.setattr(sft, "tokenize_sft_example", tokenize)
    cfg = sft.SFTConfig(
        model=str(model), data=[str(path)], out=str(tmp_path / "o"), steps=1, lora_rank=4, max_len=4096,
        retrieval="none", progress=False, device="cpu",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        sft.train(cfg)
    assert "besides 1 too long to tokenize" in caplog.text


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(max_size=300) | st.text(alphabet=" \t\nab\u0301e", max_size=1500),
    at=st.integers(0, 100),
    room=st.integers(-20, 60),
)
@hypothesis.example(text="a " * 600, at=2, room=0)  # after the last trained turn: the sample does not hold it
@hypothesis.example(text=" " * 1000 + "a", at=0, room=0)  # blanks a template or normalizer may drop
def test_an_example_said_surely_too_long_is_too_long(tiny_tokenizer, example, text, at, room):
    """Wherever the text goes (after the last trained turn too, which the sample does not hold), however
    blank or accented it is; --max-len near the sample's own length (``room`` tokens off), where the
    bound decides."""
    from tau_env.reference_trainers.cpu_common import longest_token_chars, surely_longer_than, tokenize_sft_example

    tok, template = tiny_tokenizer
    ex = {  # short, so that the bound is what decides
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "bye"},
        ],
        "tools": [],
        "train": [False, True, False],
    }
    ex["messages"][at % 3]["content"] = text
    length = len(tokenize_sft_example(tok, ex, template).input_ids)
    max_len = max(1, length + room)
    if surely_longer_than(ex, max_len, longest_token_chars(tok)):
        assert length > max_len


def test_a_huge_tool_call_argument_counts_too(example):
    from tau_env.reference_trainers.cpu_common import surely_longer_than

    ex = json.loads(json.dumps(example))
    i = max(k for k, t in enumerate(ex["train"]) if t)
    ex["messages"][i] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": "a" * 3_000_000}}],
    }
    assert surely_longer_than(ex, 4096, 16)
    ex["messages"].append({"role": "user", "content": "b" * 3_000_000})  # after the last trained turn: not held
    ex["train"].append(False)
    ex["messages"][i]["tool_calls"][0]["function"]["arguments"] = "{}"
    assert not surely_longer_than(ex, 4096, 16)
