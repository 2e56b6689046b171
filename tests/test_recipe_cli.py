"""benchmarks/recipe_cpu.py as a careless user drives it: every out-of-range flag is one
``error:`` line before any work (not a traceback hours later in a subprocess's log), a given
``--model`` that is no model folder is an error (only the default one's absence skips the run),
``--quick`` honours a given ``--out``, a rerun with other data settings is refused by flag, and a
stage's failure or Ctrl-C is one line.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu_cli", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)

BAD = [
    ("--heldout", "0"),
    ("--heldout", "9"),
    ("--heldout", "-1"),
    ("--trials", "0"),
    ("--synth-n", "0"),
    ("--sft-steps", "-1"),
    ("--sft-batch", "0"),
    ("--sft-epochs", "nan"),
    ("--sft-epochs", "0"),
    ("--sft-lr", "nan"),
    ("--sft-lr=-1e-4", None),
    ("--grpo-lr", "inf"),
    ("--grpo-group", "1"),
    ("--grpo-tasks", "0"),
    ("--turn-prefixes", "-1"),
    ("--lora-layers", "-1"),
    ("--micro-batch", "0"),
    ("--max-new-tokens", "0"),
    ("--max-steps", "0"),
    ("--workers", "0"),
    ("--threads", "-1"),
    ("--eval-temperature", "-1"),
    ("--eval-temperature", "nan"),
]


@pytest.mark.parametrize("flag, value", BAD)
def test_a_flag_out_of_range_is_one_error_line_before_any_work(flag, value, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        recipe.main([flag, *([value] if value is not None else []), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    flag = flag.partition("=")[0]
    assert e.value.code == 2 and f"error: {flag} must be" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_an_out_that_is_a_file_and_a_model_that_is_none_are_refused(tmp_path, capsys):
    file = tmp_path / "afile"
    file.write_text("x")
    for argv, said in (
        (["--out", str(file)], "is a file, not a folder"),
        (["--out", str(file / "sub")], "is a file, not a folder"),
        (["--model", str(tmp_path), "--out", str(tmp_path / "r")], "is not a model folder"),
    ):
        with pytest.raises(SystemExit) as e:
            recipe.main(argv)
        assert e.value.code == 2 and said in capsys.readouterr().err
    assert file.read_text() == "x" and not (tmp_path / "r").exists()


def test_only_the_default_models_absence_skips(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(recipe, "DEFAULT_MODEL", tmp_path / "absent")
    assert recipe.main(["--out", str(tmp_path / "r")]) == 0
    assert "skipped" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_quick_keeps_a_given_out_and_a_failure_or_interrupt_is_one_line(tmp_path, capsys, monkeypatch):
    from tau_env.error import InfrastructureError

    seen = {}

    def fake_run(args, model_dir, tmp):
        seen.update(out=args.out, model=model_dir, tmp=tmp)
        raise seen.pop("raise")

    monkeypatch.setattr(recipe, "run", fake_run)
    for raised, code, said in (
        (InfrastructureError("evaluation failed (exit 2): ... ; see shard-0.log"), 2, "error: evaluation failed"),
        (KeyboardInterrupt(), 130, "interrupted; the same command resumes"),
    ):
        seen["raise"] = raised
        assert recipe.main(["--quick", "--out", str(tmp_path / "q")]) == code
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
        assert seen["out"] == tmp_path / "q" and seen["model"] == tmp_path / "q" / "tiny" and seen["tmp"] is None


def test_a_rerun_with_other_data_settings_is_refused_by_flag(tmp_path):
    from tau_env.error import ResultsFolderError

    args = recipe.argparse.Namespace(**{k: None for k in recipe.DATA_FLAGS})
    args.seed, args.synth_n, args.synth_weights, args.quick = 0, 400, {}, False
    recipe.same_data_settings(tmp_path, args)
    recipe.same_data_settings(tmp_path, args)  # the same: it continues
    args.seed, args.synth_n = 1, 600
    with pytest.raises(ResultsFolderError, match=r"--seed: 0 there, 1 now; --synth-n: 400 there, 600 now"):
        recipe.same_data_settings(tmp_path, args)


def test_a_failed_stage_says_its_reason_not_only_where_its_log_is(tmp_path):
    import sys

    from tau_env.error import InfrastructureError

    cmd = [
        sys.executable,
        "-c",
        "import sys; print('noise'); print('tau-env: --agent-temperature must be >= 0'); sys.exit(2)",
    ]
    with pytest.raises(InfrastructureError, match=r"evaluation failed \(exit 2\): tau-env: --agent-temperature must"):
        recipe.run_workers(tmp_path, [(0, cmd)], "evaluation", single_thread=True)


def test_stop_after_sft_runs_no_dagger_and_no_grpo(tmp_path, capsys):
    # a real --quick run (tiny random model, ~1 min): the SFT stage is evaluated, then the report
    out = tmp_path / "q"
    assert recipe.main(["--quick", "--out", str(out), "--stop-after", "sft", "--dagger", "2"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed.strip().splitlines()[-1])
    assert result["after_sft"]["episodes"] >= 1 and "out_of_steps" in result["after_sft"]["route"]
    assert result["after_grpo"] is None and result["after_dagger"] is None and result["grpo_reward"] == []
    assert "stopped after sft (--stop-after): no DAgger, no GRPO" in printed and "after GRPO" not in printed
    assert not list(out.glob("grpo_from_*")) and not list(out.glob("dagger*"))
    assert (out / "sft" / "metrics.jsonl").is_file()


def test_stop_after_is_one_of_the_stages(capsys):
    with pytest.raises(SystemExit) as e:
        recipe.main(["--quick", "--stop-after", "rl"])
    assert e.value.code == 2 and "--stop-after: invalid choice: 'rl'" in capsys.readouterr().err


def test_stop_after_dagger_without_a_dagger_round_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        recipe.main(["--quick", "--stop-after", "dagger"])
    assert e.value.code == 2 and "--stop-after dagger needs --dagger N" in capsys.readouterr().err


def test_stop_after_dagger_runs_dagger_and_no_grpo(tmp_path, capsys):
    out = tmp_path / "q"
    assert recipe.main(["--quick", "--out", str(out), "--stop-after", "dagger", "--dagger", "2"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed.strip().splitlines()[-1])
    assert result["after_dagger"]["episodes"] >= 1 and result["dagger"] is not None
    assert result["after_grpo"] is None and result["grpo_reward"] == []
    assert "after DAgger" in printed and "stopped after dagger (--stop-after): no GRPO" in printed
    assert list(out.glob("sft_dagger_from_*")) and not list(out.glob("grpo_from_*"))
