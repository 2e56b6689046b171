"""``--device``: where the CPU trainers, DAgger, ``tau-env eval --agent-checkpoint`` and the recipe
script run the model. ``auto`` is a GPU when torch sees one, else the CPU; a form that is no device
is refused by its flag when the settings are made; a GPU the machine lacks is said before anything
is read, loaded or written. (No GPU here: what a GPU run does is left to the GPU machine; these
check the choice, the refusals and that a CPU run chosen explicitly is the default's.)
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tau_env.reference_trainers import dagger, grpo, sft  # noqa: E402
from tau_env.reference_trainers.checkpoint import load_checkpoint  # noqa: E402
from tau_env.reference_trainers.cpu_common import (  # noqa: E402
    DEVICE_RE,
    LoRALinear,
    build_tiny_model,
    check_device,
    resolve_device,
)

import tau_env  # noqa: E402
from tau_env.error import InvalidOptionError  # noqa: E402
from tau_env.sft import to_example  # noqa: E402

GOOD = ["auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:123"]
BAD = ["", "gpu", "CUDA", "Cpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1234", " cpu", "cpu ", "mps", "cuda:0,1", 0, None]


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine as one without a GPU, whatever it has (the checks must not depend on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    run = tau_env.evaluate("harbor-bank-v0", tau_env.OracleAgent, tau_env.ScriptedUser, task_ids=["found_card_unlock"])
    examples = [to_example(r.to_dict()) for r in run.results]
    data = tmp_path_factory.mktemp("data") / "sft.jsonl"
    data.write_text("".join(json.dumps(ex) + "\n" for ex in examples), encoding="utf-8")
    model = build_tiny_model(tmp_path_factory.mktemp("tiny"), [json.dumps(ex) for ex in examples] * 3)
    return model, data


@pytest.mark.parametrize("cls", [sft.SFTConfig, grpo.GRPOConfig])
def test_the_configs_take_the_device_forms_and_refuse_the_rest_by_flag(cls):
    assert cls().device == "auto"
    for good in GOOD:
        assert cls(device=good).device == good
    for bad in BAD:
        with pytest.raises(InvalidOptionError, match="^--device must be auto, cpu, cuda or cuda:N"):
            cls(device=bad)


@given(st.one_of(st.text(max_size=12), st.integers(), st.none(), st.floats()))
def test_any_device_value_is_a_form_or_a_clear_refusal(value):
    try:
        check_device(value)
    except InvalidOptionError as e:
        assert str(e).startswith("--device must be") and len(str(e)) < 200  # a huge value is not echoed whole
    else:
        assert isinstance(value, str) and DEVICE_RE.fullmatch(value)


def test_auto_is_the_cpu_without_a_gpu_and_a_missing_gpu_is_refused(no_gpu):
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for device in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(InvalidOptionError, match=f"--device {device}: .*sees no GPU.*--device cpu"):
            resolve_device(device)


def test_auto_is_the_first_gpu_and_an_index_past_the_last_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    assert resolve_device("cuda:01") == torch.device("cuda:1")  # a form torch's own parser refuses
    with pytest.raises(InvalidOptionError, match="--device cuda:2: .*sees 2 GPUs"):
        resolve_device("cuda:2")


def test_lora_factors_sit_beside_the_weights_they_adapt():
    torch.manual_seed(0)
    on_cpu = LoRALinear(torch.nn.Linear(8, 4), rank=2, alpha=4.0)
    meta = LoRALinear(torch.nn.Linear(8, 4, device="meta"), rank=2, alpha=4.0)
    assert {p.device.type for p in on_cpu.parameters()} == {"cpu"}
    assert {p.device.type for p in meta.parameters()} == {"meta"}  # not left on the CPU beside them
    assert on_cpu.lora_A.abs().sum() > 0 and torch.count_nonzero(on_cpu.lora_B) == 0


@pytest.mark.parametrize("trainer", ["sft", "grpo"])
def test_a_missing_gpu_is_said_before_anything_is_read_or_written(trainer, tiny, tmp_path, no_gpu):
    model, data = tiny
    out = tmp_path / "run"
    if trainer == "sft":
        cfg = sft.SFTConfig(model=str(model), data=[str(tmp_path / "missing.jsonl")], out=str(out), device="cuda")
        run = sft.train
    else:
        cfg = grpo.GRPOConfig(model=str(model), out=str(out), device="cuda:1")
        run = grpo.train
    with pytest.raises(InvalidOptionError, match="--device cuda"):  # not the missing data file
        run(cfg)
    assert not out.exists()


def test_the_trainers_and_dagger_command_lines_refuse_a_device_in_one_line(tiny, tmp_path, capsys, no_gpu):
    model, data = tiny
    argv = ["--model", str(model), "--data", str(data), "--out", str(tmp_path / "s"), "--no-progress"]
    for main, extra in ((sft.main, argv), (grpo.main, ["--model", str(model), "--out", str(tmp_path / "g")])):
        for device, said in (("gpu", "--device must be"), ("cuda", "--device cuda: ")):
            with pytest.raises(SystemExit) as e:
                code = main([*extra, "--device", device])
                raise SystemExit(code)
            assert e.value.code == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert said in err[-1] and "error:" in err[-1] and "Traceback" not in "\n".join(err)
    with pytest.raises(SystemExit) as e:
        dagger.main(["--checkpoint", str(model), "--out", str(tmp_path / "d"), "--device", "tpu"])
    assert e.value.code == 2 and "--device must be" in capsys.readouterr().err
    assert not any((tmp_path / x).exists() for x in ("s", "g", "d"))


def test_sft_on_the_cpu_named_is_the_default_run_and_runs_move_between_devices(tiny, tmp_path, no_gpu):
    from tau_env.cli import main

    model, data = tiny

    def train(out: Path, device: str) -> Path:
        return sft.train(
            sft.SFTConfig(
                model=str(model), data=[str(data)], out=str(out), steps=2, batch_size=1, micro_batch=1,
                lora_rank=4, retrieval="none", max_new_tokens=4, progress=False, device=device,
            )
        )  # fmt: skip

    a, b = train(tmp_path / "auto", "auto"), train(tmp_path / "cpu", "cpu")
    wa, wb = load_checkpoint(a).model.state_dict(), load_checkpoint(b).model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    # a run resumes on another device setting (a run moved between machines): device is free to change
    resumed = sft.train(
        sft.SFTConfig(
            model=str(model), data=[str(data)], out=str(tmp_path / "cpu"), steps=3, batch_size=1, micro_batch=1,
            lora_rank=4, retrieval="none", max_new_tokens=4, progress=False, device="auto",
        )
    )  # fmt: skip
    assert resumed.name == "step-000003"
    # an evaluation begun on one device resumes on another: the device is not one of the run's settings
    out = tmp_path / "eval"
    argv = ["eval", "--agent-checkpoint", str(a), "--task", "found_card_unlock", "--max-steps", "3", "--quiet"]
    assert main([*argv, "--agent-device", "cpu", "--out", str(out)]) == 0
    first = (out / "trajectories.jsonl").read_text()
    assert main([*argv, "--agent-device", "auto", "--out", str(out)]) == 0  # resumed: nothing left to play
    assert (out / "trajectories.jsonl").read_text() == first and len(first.splitlines()) == 1
    assert "device" not in json.dumps(json.loads((out / "config.json").read_text())["agent_checkpoint"])


def test_eval_refuses_a_missing_gpu_and_a_device_without_a_checkpoint(tiny, tmp_path, capsys, no_gpu):
    from tau_env.cli import main

    model, data = tiny
    ckpt = sft.train(
        sft.SFTConfig(
            model=str(model), data=[str(data)], out=str(tmp_path / "r"), steps=1, batch_size=1, micro_batch=1,
            lora_rank=4, retrieval="none", max_new_tokens=4, progress=False, device="cpu",
        )
    )  # fmt: skip
    for argv, said in (
        (["--agent-checkpoint", str(ckpt), "--agent-device", "cuda"], "--agent-device cuda: "),
        (["--agent-checkpoint", str(ckpt), "--agent-device", "gpu"], "--agent-device must be"),
        (["--agent-device", "cpu"], "--agent-device places --agent-checkpoint's model"),
        (["--agent-checkpoint", str(ckpt), "--backend", "ray"], "--backend ray cannot ship it"),
    ):
        out = tmp_path / f"eval-{len(argv)}-{argv[-1]}"
        assert main(["eval", *argv, "--task", "found_card_unlock", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
        assert not (out / "trajectories.jsonl").exists()


def test_the_recipe_refuses_a_missing_gpu_before_it_starts(tmp_path, capsys, no_gpu):
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "recipe_cpu.py"
    spec = importlib.util.spec_from_file_location("recipe_cpu_devices", script)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    with pytest.raises(SystemExit) as e:
        recipe.main(["--quick", "--out", str(tmp_path / "run"), "--device", "cuda"])
    assert e.value.code == 2 and "--device cuda: " in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_recipe_takes_the_trainers_thread_cap(tmp_path, capsys):
    from tau_env.reference_trainers.cpu_common import max_threads

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "recipe_cpu.py"
    spec = importlib.util.spec_from_file_location("recipe_cpu_threads", script)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    for threads in (max_threads() + 1, 4096, -1):
        with pytest.raises(SystemExit) as e:
            recipe.main(["--quick", "--out", str(tmp_path / "run"), "--threads", str(threads)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--threads must be a whole number from 0 to " in err and f", not {threads}" in err
        assert threads < 0 or f"from 0 to {max_threads()}," in err  # the trainers' cap
    assert not (tmp_path / "run").exists()


def _precision() -> str:
    return torch.backends.cuda.matmul.fp32_precision


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch < 2.9")
def test_tf32_is_the_trainers_for_their_run_and_the_callers_setting_comes_back(monkeypatch):
    from tau_env.reference_trainers.cpu_common import matmul_precision

    before = _precision()
    with matmul_precision(torch.device("cpu"), tf32=True):
        assert _precision() == before  # nothing on a CPU
    with matmul_precision(torch.device("cuda"), tf32=True):
        assert _precision() == "tf32"
        with matmul_precision(torch.device("cuda", 1), tf32=False):  # a LoRA merge inside a TF32 run is exact
            assert _precision() == "ieee"
        assert _precision() == "tf32"
    assert _precision() == before
    with pytest.raises(RuntimeError, match="boom"), matmul_precision(torch.device("cuda"), tf32=True):
        raise RuntimeError("boom")
    assert _precision() == before

    # the trainers' train(): TF32 inside on a GPU, the caller's setting after, a failure included
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for module, cfg in ((sft, sft.SFTConfig(device="cuda")), (grpo, grpo.GRPOConfig(device="cuda"))):
        seen = []
        monkeypatch.setattr(module, "_train", lambda c, stack, seen=seen: seen.append(_precision()) or Path("done"))
        assert module.train(cfg) == Path("done") and seen == ["tf32"]
        assert _precision() == before
        monkeypatch.setattr(module, "_train", lambda c, stack: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            module.train(cfg)
        assert _precision() == before
        seen.clear()
        monkeypatch.setattr(module, "_train", lambda c, stack, seen=seen: seen.append(_precision()) or Path("done"))
        module.train(type(cfg)(device="cpu"))
        assert seen == [before]
