"""tau_env's veRL plugin: the LOO estimators through veRL's own compute_advantage against
objectives.py, the rollout-correction mapping against objectives.grpo_loss, the config overlay composed
on veRL's base config, and the start-up check. Runs only where veRL is installed; skips elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verl")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tau_env.reference_trainers import verl_plugins as vp  # noqa: E402
from tau_env.reference_trainers.objectives import group_loo_advantages, grpo_loss, rollout_mask  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask  # noqa: E402
from verl_helpers import CONFIGS  # noqa: E402


def _batch(rewards, groups, mask):
    n, t = mask.shape
    tlr = torch.zeros(n, t)
    tlr[:, -1] = torch.tensor(rewards, dtype=torch.float32)
    data = DataProto.from_dict(tensors={"token_level_rewards": tlr, "response_mask": mask})
    data.non_tensor_batch["uid"] = np.array(groups, dtype=object)
    return data


def test_registered_names():
    assert all(vp.registered().values())
    assert core_algos.get_adv_estimator_fn("tau_loo") is vp.compute_tau_loo_advantage


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from([0.0, 1.0, 0.5]), min_size=2, max_size=6), min_size=1, max_size=4),
    st.integers(0, 2**16),
)
def test_tau_loo_through_verl_compute_advantage_equals_objectives(groups, seed):
    rewards = [r for g in groups for r in g]
    uids = [f"task{k}" for k, g in enumerate(groups) for _ in g]
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(len(rewards), 7, generator=gen) > 0.4).long()
    out = compute_advantage(_batch(rewards, uids, mask), adv_estimator="tau_loo", config=None)
    expected = group_loo_advantages(torch.tensor(rewards), uids)
    assert torch.allclose(out.batch["advantages"], expected.unsqueeze(-1) * mask, atol=1e-6)
    assert (out.batch["advantages"][mask == 0] == 0).all()  # only agent tokens carry an advantage


def test_equal_rewards_give_zero_advantage():
    mask = torch.ones(8, 5, dtype=torch.long)
    for name in vp.ESTIMATORS:
        out = compute_advantage(_batch([1.0] * 8, ["a"] * 8, mask), adv_estimator=name, config=None)
        assert (out.batch["advantages"] == 0).all()


def test_hand_computed_group():
    # rewards (1, 0, 0, 0): b(1) = 0, sigma(1) = 0 -> A = 1; b(2) = 1/3, sigma = sqrt(2)/3 -> A = -1/sqrt(2)
    mask = torch.ones(4, 3, dtype=torch.long)
    out = compute_advantage(_batch([1, 0, 0, 0], ["a"] * 4, mask), adv_estimator="tau_loo", config=None)
    a = out.batch["advantages"][:, 0]
    assert a[0].item() == pytest.approx(1.0) and a[1].item() == pytest.approx(-(2**-0.5))


def _verl_loss(new, old, roll, rewards, uids, mask, estimator="tau_loo_group", is_cap=2.0, delta=0.1):
    from verl.workers.config import FSDPActorConfig

    rc = vp.rollout_correction(is_cap, delta)
    w, kept_mask, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old,
        rollout_log_prob=roll,
        response_mask=mask,
        rollout_is=rc["rollout_is"],
        rollout_is_threshold=rc["rollout_is_threshold"],
        rollout_is_batch_normalize=False,
        rollout_rs=rc["rollout_rs"],
        rollout_rs_threshold=rc["rollout_rs_threshold"],
    )
    out = compute_advantage(_batch(rewards, uids, kept_mask), adv_estimator=estimator, config=None)
    cfg = FSDPActorConfig(
        strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=4, ppo_mini_batch_size=4, clip_ratio=0.2,
        clip_ratio_c=1e9, loss_agg_mode="token-mean",
    )  # fmt: skip
    loss, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old,
        log_prob=new,
        advantages=out.batch["advantages"],
        response_mask=kept_mask,
        loss_agg_mode="token-mean",
        config=cfg,
        rollout_is_weights=w.batch["rollout_is_weights"],
    )
    return loss, kept_mask


@pytest.mark.parametrize("seed", range(4))
def test_verl_loss_with_our_mapping_equals_grpo_loss_averaged_over_groups(seed):
    g, k, t = 4, 3, 12
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(g * k, t, generator=gen) > 0.3).long()
    mask[:, 0] = 1
    old = -torch.rand(g * k, t, generator=gen)
    roll = old + 0.02 * torch.randn(g * k, t, generator=gen)  # inside the mask's band: no rollout masked
    roll[:, 3] = old[:, 3] - 1.0  # a token whose IS weight e > C = 2 is truncated
    new = (old + 0.1 * torch.randn(g * k, t, generator=gen)).requires_grad_(True)
    rewards = torch.randint(0, 2, (g * k,), generator=gen).float()
    uids = [f"u{i // g}" for i in range(g * k)]
    loss, kept = _verl_loss(new, old, roll, rewards.tolist(), uids, mask, delta=0.9)
    assert kept.sum() == mask.sum()
    ref = torch.stack(
        [grpo_loss(new[s : s + g], old[s : s + g], roll[s : s + g], rewards[s : s + g], mask[s : s + g],
                   mask_delta=0.9)[0] for s in range(0, g * k, g)]
    ).mean()  # fmt: skip
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-7)
    (gv,) = torch.autograd.grad(loss, new)
    (gr,) = torch.autograd.grad(ref, new)
    assert torch.allclose(gv, gr, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.floats(-0.3, 0.3), st.sampled_from([0.05, 0.1, 0.2]))
def test_verl_rollout_rejection_is_our_rollout_mask(shift, delta):
    t = 6
    mask = torch.ones(1, t, dtype=torch.long)
    old = torch.full((1, t), -1.0)
    roll = old - shift  # mean log w = shift
    rc = vp.rollout_correction(2.0, delta)
    _, kept, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=roll, response_mask=mask, rollout_is="token",
        rollout_is_threshold=2.0, rollout_rs=rc["rollout_rs"], rollout_rs_threshold=rc["rollout_rs_threshold"],
    )  # fmt: skip
    ours = rollout_mask(old, roll, mask, delta)
    near_bound = min(abs(shift - np.log(1 + delta)), abs(shift - np.log(1 - delta))) < 1e-5
    if not near_bound:
        assert bool(kept.sum() > 0) == bool(ours[0] == 1)


def _rows(path, n: int = 64):
    """A parquet of ``n`` rows at ``path``: the start-up check reads how many rows train_files hold."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": list(range(n))}), str(path))
    return path


def test_config_overlay_composes_on_verls_base(tmp_path):
    train = _rows(tmp_path / "rl.parquet")
    cfg = vp.compose_config(
        str(CONFIGS), "tau_grpo", ["actor_rollout_ref.model.path=/nowhere", f"data.train_files={train}"]
    )
    assert cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.data.train_batch_size == 64 == cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(2e-6)
    assert cfg.algorithm.adv_estimator == "tau_loo_group"
    rc = cfg.algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_rs) == ("token", 2.0, "seq_mean_k1")
    assert rc.rollout_rs_threshold == vp.rollout_correction(2.0, 0.1)["rollout_rs_threshold"]
    # veRL's own keys are still there (the overlay only overrides)
    assert cfg.actor_rollout_ref.rollout.prompt_length == cfg.data.max_prompt_length
    assert "critic" in cfg and "reward" in cfg
    vp.check_config(cfg, is_cap=2.0, mask_delta=0.1)


def test_sft_overlay_composes():
    cfg = vp.compose_config(str(CONFIGS), "tau_sft")
    assert cfg.optim.lr == pytest.approx(5e-5)
    assert cfg.data.custom_cls.name == "TauSFTDataset"
    assert cfg.data.custom_cls.path == "pkg://tau_env.reference_trainers.verl_data"


def test_check_config_names_what_is_wrong():
    cfg = vp.compose_config(
        str(CONFIGS), "tau_grpo", ["algorithm.adv_estimator=grpo", "algorithm.rollout_correction.rollout_rs=null"]
    )
    with pytest.raises(vp.PluginNotRegistered, match="adv_estimator is 'grpo'.*rollout_rs=None"):
        vp.check_config(cfg)
    cfg = vp.compose_config(str(CONFIGS), "tau_grpo", ["algorithm.rollout_correction.rollout_is_threshold=3.0"])
    with pytest.raises(vp.PluginNotRegistered, match="rollout_is_threshold is 3.0"):
        vp.check_config(cfg, is_cap=2.0)


def test_start_up_check_raises_when_unregistered(monkeypatch):
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "tau_loo_group")
    with pytest.raises(vp.PluginNotRegistered, match="tau_loo_group.*VERL_USE_EXTERNAL_MODULES"):
        vp.require_registered()


def test_correction_settings_reject_bad_numbers():
    with pytest.raises(Exception, match="is_cap"):
        vp.rollout_correction(0.0, 0.1)
    with pytest.raises(Exception, match="mask_delta"):
        vp.rollout_correction(2.0, -1.0)
    assert vp.rollout_correction(2.0, 1.5)["rollout_rs_threshold"].endswith("_1e+30")


def test_importing_verl_registers_our_estimators_through_the_entry_point():
    # no VERL_USE_EXTERNAL_MODULES: veRL finds tau_env's plugin in the "verl.plugins" entry-point group
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    code = (
        "import verl\n"
        "from verl.trainer.ppo import core_algos\n"
        "print(sorted(k for k in core_algos.ADV_ESTIMATOR_REGISTRY if k.startswith('tau_')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "['tau_loo', 'tau_loo_group']", out.stderr[-2000:]


def test_the_start_up_command_checks_a_fresh_process_and_fails_when_the_plugin_is_not_loaded(monkeypatch, capsys):
    """``python -m ...verl_plugins`` imports the plugin itself, so its own registries prove nothing:
    it asks a fresh ``import verl`` process, as a worker starts. With external plugins switched off
    and no VERL_USE_EXTERNAL_MODULES, that process lacks the names: exit 2, one line."""
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    assert vp.main([]) == 0 and "registered in a fresh veRL process" in capsys.readouterr().out
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "none")
    assert vp.main([]) == 2
    err = capsys.readouterr().err
    assert "does not know tau_loo, tau_loo_group, tau_agent" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "tau_env.reference_trainers.verl_plugins")
    assert vp.main([]) == 0


@pytest.mark.parametrize(
    "module", ["tau_env.reference_trainers.verl_plugin", "tau_envv.reference_trainers.verl_plugins"]
)
def test_a_misspelt_external_module_is_named_not_taken_for_a_missing_verl(module):
    import os
    import subprocess
    import sys

    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": module}
    done = subprocess.run(
        [sys.executable, "-m", "tau_env.reference_trainers.verl_plugins"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr[-2000:]
    assert f"VERL_USE_EXTERNAL_MODULES names {module!r}, which does not import" in done.stderr
    assert "not importable" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "overrides, said",
    [
        (["no.such.key=1"], "the veRL config does not compose"),
        (["actor_rollout_ref.rollout.n=1"], "rollout.n is 1: a group needs at least 2"),
        (["algorithm.rollout_correction.rollout_rs_threshold=0.5"], "rollout_rs_threshold is 0.5"),
        (["algorithm.rollout_correction.rollout_is_threshold=null"], "rollout_is_threshold is None"),
    ],
)
def test_the_start_up_command_says_a_bad_config_in_one_line(overrides, said, capsys):
    argv = ["--config-dir", str(CONFIGS), "--config-name", "tau_grpo", "--is-cap", "2", "--mask-delta", "0.1"]
    assert vp.main([*argv, "actor_rollout_ref.model.path=/nowhere", *overrides]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_launchers_pass_paths_with_hydra_syntax_in_them_as_one_value(tmp_path):
    """A model or data path with spaces, parentheses, commas, '=', brackets or a quote reaches veRL
    as that path (the launchers quote each for Hydra): the start-up check composes the config, and
    veRL's launcher gets overrides that parse back to the same paths."""
    import os
    import shlex
    import subprocess
    import sys

    from hydra.core.override_parser.overrides_parser import OverridesParser

    odd = tmp_path / "run (copy), it's=[1] $x {y} \\'"
    odd.mkdir()
    model, train = odd / "model", _rows(odd / "rl.parquet")
    launched = tmp_path / "launched.txt"
    stub = tmp_path / "python"  # the real Python for the start-up check; veRL's launcher only recorded
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$2" = tau_env.reference_trainers.verl_plugins ]; then exec {shlex.quote(sys.executable)} "$@"; fi\n'
        f'printf "%s\\n" "$@" > {shlex.quote(str(launched))}\n'
    )
    stub.chmod(0o755)
    script = CONFIGS.parent / "launch" / "grpo_single_node.sh"
    env = {**os.environ, "MODEL": str(model), "TRAIN": str(train), "PYTHON": str(stub), "GPUS": "1"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    parser = OverridesParser.create()
    values = {}
    for arg in launched.read_text().splitlines():
        if "=" in arg and not arg.startswith("-"):
            o = parser.parse_override(arg)
            values[o.key_or_group] = o.value()
    assert _as_config_holds(values["actor_rollout_ref.model.path"]) == str(model)
    assert _as_config_holds(values["data.train_files"]) == _as_config_holds(values["data.val_files"]) == str(train)


def _as_config_holds(value):
    """What veRL's config holds for an override's value: main_ppo resolves the whole config first."""
    from omegaconf import OmegaConf

    config = OmegaConf.create({"value": value})
    OmegaConf.resolve(config)
    return config.value


def _hq(value: str) -> str:
    import subprocess

    script = f'. "{CONFIGS.parent / "launch" / "hydra_quote.sh"}"; hq "$1"'
    return subprocess.run(["bash", "-c", script, "hq", value], capture_output=True, text=True, check=True).stdout


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\\'\"${}[](),= a\né-")), max_size=14).filter(lambda v: "${" not in v))
def test_hq_gives_veRLs_config_any_value_without_an_interpolation_as_written(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    override = OverridesParser.create().parse_override("k=" + _hq(value))
    assert _as_config_holds(override.value()) == value


_LAUNCHERS = ["launch/grpo_single_node.sh", "launch/grpo_ray_cluster.sh", "launch/sft_single_node.sh", "gpu_smoke.sh"]


def _launcher_env(tmp_path, **more):
    """What a launcher needs to get past its checks, with a stub Python that marks ``launched``."""
    import os

    launched = tmp_path / "launched"
    stub = tmp_path / "python"
    stub.write_text(f"#!/usr/bin/env bash\ntouch '{launched}'\n")
    stub.chmod(0o755)
    env = {
        **os.environ,
        "MODEL": str(tmp_path / "m"),
        "TRAIN": str(tmp_path / "t.parquet"),
        "RAY_ADDRESS": "http://127.0.0.1:1",
        "NNODES": "1",
        "PYTHON": str(stub),
        **more,
    }
    return env, launched


_READS = {  # what each launcher needs beyond the GPU count
    "launch/grpo_single_node.sh": ("MODEL", "TRAIN"),
    "launch/grpo_ray_cluster.sh": ("MODEL", "TRAIN", "NNODES", "RAY_ADDRESS"),
    "launch/sft_single_node.sh": ("MODEL", "TRAIN"),
    "gpu_smoke.sh": ("MODEL",),
}
_BAD = [
    ("", "set {} to "),
    (None, "set {} to "),
]
_COUNTS = [("abc", "{}=abc is not"), ("0", "{}=0 is not"), ("8 x", "{}=8 x is not"), ("-2", "{}=-2 is not")]


@pytest.mark.parametrize(
    "script, change, said",
    [(s, {v: value}, said.format(v)) for s, names in _READS.items() for v in names for value, said in _BAD]
    + [(s, {"GPUS": value}, said.format("GPUS")) for s in _LAUNCHERS for value, said in _COUNTS]
    + [("launch/grpo_ray_cluster.sh", {"NNODES": value}, said.format("NNODES")) for value, said in _COUNTS],
)
def test_a_launcher_says_a_missing_or_bad_variable_in_one_line_before_it_starts(script, change, said, tmp_path):
    import os
    import subprocess

    env, launched = _launcher_env(tmp_path, PATH=f"{tmp_path}:{os.environ['PATH']}", WORK=str(tmp_path / "work"))
    env.pop("GPUS", None)
    for key, value in change.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    done = subprocess.run(["bash", str(CONFIGS.parent / script)], env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and said in done.stderr
    assert not launched.exists()


@pytest.mark.parametrize("script", ["grpo_single_node.sh", "grpo_ray_cluster.sh", "sft_single_node.sh"])
@pytest.mark.parametrize("var", ["MODEL", "TRAIN", "VAL"])
def test_a_launcher_refuses_a_path_veRL_would_read_as_an_interpolation(script, var, tmp_path):
    """veRL resolves its config (OmegaConf.resolve) before reading it: no quoting keeps '${' as text."""
    import subprocess

    env, launched = _launcher_env(tmp_path, **{var: str(tmp_path / "run ${oc.env:HOME}" / "x")})
    done = subprocess.run(["bash", str(CONFIGS.parent / "launch" / script)], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and not launched.exists()
    assert f"{script}: {var}=" in done.stderr and "interpolation" in done.stderr


def test_the_ray_launcher_gets_odd_paths_through_rays_shell(tmp_path):
    """Ray joins a job's entrypoint with quotes only around whitespace and runs it through a shell:
    the launcher sends the arguments base64-encoded (verl_launch), so a path with a comma,
    parentheses or a quote reaches veRL's main_ppo as that path."""
    import os
    import shlex
    import subprocess
    import sys

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from tau_env.reference_trainers import verl_launch

    odd = tmp_path / "run(1),it's$x{y}\\"
    odd.mkdir()
    model, train = odd / "model", _rows(odd / "rl.parquet")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    entry = tmp_path / "entry.txt"
    stub = bin_dir / "python"  # the real Python, but for the job's entrypoint, which it records
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$2" = tau_env.reference_trainers.verl_launch ] && [ "$3" != --encode ]; then '
        f'printf "%s\\n" "$@" > {shlex.quote(str(entry))}; exit 0; fi\n'
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    ray = bin_dir / "ray"  # ray job submit as Ray runs it: list2cmdline, then a shell
    ray.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "cmd = sys.argv[sys.argv.index('--') + 1:]\n"
        "sys.exit(subprocess.run(subprocess.list2cmdline(cmd), shell=True).returncode)\n"
    )
    for f in (stub, ray):
        f.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "RAY_ADDRESS": "http://127.0.0.1:1",
        "MODEL": str(model),
        "TRAIN": str(train),
        "NNODES": "1",
        "PYTHON": str(stub),
    }
    script = CONFIGS.parent / "launch" / "grpo_ray_cluster.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    words = entry.read_text().splitlines()
    assert words[:2] == ["-m", "tau_env.reference_trainers.verl_launch"] and len(words) == 3
    args = verl_launch.decode(words[2])
    # the configs of the tau-env where the job runs, not this checkout's path (a laptop's, submitting)
    assert args[:4] == ["--config-path", "@tau_env_configs", "--config-name", "tau_grpo"]
    args = verl_launch.resolve_marks(args)
    assert args[1] == verl_launch.configs_dir() and Path(args[1]).resolve() == CONFIGS.resolve()
    parser = OverridesParser.create()
    values = {o.key_or_group: _as_config_holds(o.value()) for o in map(parser.parse_override, args[4:])}
    loop = values["actor_rollout_ref.rollout.agent.agent_loop_config_path"]
    assert Path(loop).resolve() == (CONFIGS / "tau_agent_loop.yaml").resolve()
    assert values["actor_rollout_ref.model.path"] == str(model)
    assert values["data.train_files"] == values["data.val_files"] == str(train)


@given(st.lists(st.text(), max_size=6))
def test_the_launch_encoding_round_trips_any_arguments(args):
    from tau_env.reference_trainers import verl_launch

    word = verl_launch.encode(args)
    assert word.isascii() and all(c.isalnum() or c in "+/=" for c in word)
    assert verl_launch.decode(word) == args


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=12).filter(lambda b: b"\0" not in b))
@example(b"\xe9\\")  # bash 5.2 in C.UTF-8 printed what lay in memory after it
def test_hq_reads_a_path_byte_by_byte_whatever_the_locale(value):
    """A path need not be UTF-8: in a UTF-8 locale bash's pattern matching read garbage there."""
    import os
    import subprocess

    script = f'. "{CONFIGS.parent / "launch" / "hydra_quote.sh"}"; hq "$1"'
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    got = subprocess.run([b"bash", b"-c", script.encode(), b"hq", value], env=env, capture_output=True).stdout
    expected, run = b"", b""
    for byte in value:  # the escaping hq does, byte by byte
        c = bytes([byte])
        if c == b"\\":
            run += c
            continue
        expected += (run * 2 + b"\\'") if c == b"'" else run + c
        run = b""
    assert got == b"'" + expected + run * 2 + b"'"


@pytest.mark.parametrize(
    "override, said",
    [
        ("algorithm.rollout_correction.rollout_is_threshold=null", "rollout_is_threshold is None"),
        ("algorithm.rollout_correction.rollout_is_threshold=-3", "rollout_is_threshold is -3"),
        ("algorithm.rollout_correction.rollout_rs_threshold=abc", "rollout_rs_threshold is 'abc'"),
        ("algorithm.rollout_correction.rollout_rs_threshold=0.5", "rollout_rs_threshold is 0.5"),
        ("algorithm.rollout_correction.rollout_rs_threshold='1.2_2.0'", "0 < LOWER <= 1 <= UPPER"),
        ("algorithm.rollout_correction.rollout_is_batch_normalize=true", "rollout_is_batch_normalize must be false"),
    ],
)
def test_the_start_up_check_refuses_thresholds_that_are_no_cap_or_band(override, said, capsys):
    """As the launchers call it (no --is-cap/--mask-delta): these passed as 'config checked'."""
    argv = [
        "--config-dir",
        str(CONFIGS),
        "--config-name",
        "tau_grpo",
        "--",
        "actor_rollout_ref.model.path=/m",
        override,
    ]
    assert vp.main(argv) == 2
    assert said in capsys.readouterr().err


def test_the_start_up_check_reads_the_agent_loop_file(tmp_path, capsys):
    """A missing or misspelt tau_agent_loop.yaml failed only when veRL's workers started (after Ray and the model)."""
    good = (CONFIGS / "tau_agent_loop.yaml").read_text()
    cases = {
        tmp_path / "missing.yaml": "cannot be read as YAML",
        tmp_path / "typo.yaml": "'max_new_token' is not one",
        tmp_path / "family.yaml": "family must be auto or one of",
        tmp_path / "other.yaml": "no entry named 'tau_agent'",
        # values the workers refused only at their first rollout, and a key that reached no one
        tmp_path / "llm.yaml": "user 'llm' needs user_model",
        tmp_path / "lots.yaml": "max_new_tokens must be a whole number of at least 1, not 'lots'",
        tmp_path / "zero.yaml": "max_new_tokens must be a whole number of at least 1, not 0",
        tmp_path / "top_k.yaml": "'top_k' is no setting of the tau_agent loop",
    }
    (tmp_path / "typo.yaml").write_text(good.replace("max_new_tokens:", "max_new_token:"))
    (tmp_path / "family.yaml").write_text(good.replace("family: auto", "family: llama"))
    (tmp_path / "other.yaml").write_text(good.replace("name: tau_agent", "name: other"))
    (tmp_path / "llm.yaml").write_text(good.replace("user: scripted", "user: llm"))
    (tmp_path / "lots.yaml").write_text(good.replace("max_new_tokens: 1024", "max_new_tokens: lots"))
    (tmp_path / "zero.yaml").write_text(good.replace("max_new_tokens: 1024", "max_new_tokens: 0"))
    (tmp_path / "top_k.yaml").write_text(good + "  top_k: 5\n")
    # veRL builds the entry's _target_ (none: a DictConfig, not a loop), keeps the last of two entries,
    # and the loop's user_model defaults to None
    cases[tmp_path / "no_target.yaml"] = "_target_ is None"
    (tmp_path / "no_target.yaml").write_text("- name: tau_agent\n  family: qwen\n")
    cases[tmp_path / "dup.yaml"] = "2 entries named 'tau_agent'"
    (tmp_path / "dup.yaml").write_text(good + good.replace("family: auto", "family: llama"))
    cases[tmp_path / "llm_no_key.yaml"] = "user 'llm' needs user_model"
    (tmp_path / "llm_no_key.yaml").write_text(
        "".join(x + "\n" for x in good.splitlines() if not x.strip().startswith("user_model")).replace(
            "user: scripted", "user: llm"
        )
    )
    train = _rows(tmp_path / "rl.parquet")
    base = [
        "--config-dir", str(CONFIGS), "--config-name", "tau_grpo", "--", "actor_rollout_ref.model.path=/m",
        f"data.train_files={train}",
    ]  # fmt: skip
    key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    assert vp.main([*base, f"{key}={CONFIGS / 'tau_agent_loop.yaml'}"]) == 0
    capsys.readouterr()
    for path, said in cases.items():
        assert vp.main([*base, f"{key}={path}"]) == 2, path
        assert said in capsys.readouterr().err
    # read as veRL's workers read it (OmegaConf): its numbers and ${...} interpolations
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        good.replace("user_temperature: 0.0", "user_temperature: 1e-1").replace(
            "loop_limit: 5", "loop_limit: ${oc.decode:'7'}"
        )
    )
    assert vp.main([*base, f"{key}={ok}"]) == 0, capsys.readouterr().err


def test_the_start_up_check_counts_the_training_rows_and_runs_verls_own_validation(tmp_path, capsys):
    # 63 rows (Harbor Bank's tasks) at the recipe's 64 per batch: veRL made 0 steps, then divided by 0
    # after Ray, vLLM and the model had started; and veRL's validate_config refused the overlay itself
    key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    base = [
        "--config-dir", str(CONFIGS), "--config-name", "tau_grpo", "--", "actor_rollout_ref.model.path=/m",
        f"{key}={CONFIGS / 'tau_agent_loop.yaml'}", "trainer.n_gpus_per_node=8",
    ]  # fmt: skip
    few = _rows(tmp_path / "few.parquet", 63)
    assert vp.main([*base, f"data.train_files={few}"]) == 2
    err = capsys.readouterr().err
    assert "data.train_files hold 63 usable row(s) (data.train_max_samples counted), fewer than one batch of 64" in err
    assert vp.main([*base, f"data.train_files={few}", "data.train_batch_size=63"]) == 2  # 63 x 8 on 8 GPUs: veRL
    assert "veRL's own validation" in capsys.readouterr().err
    assert (
        vp.main(
            [
                *base,
                f"data.train_files={few}",
                "data.train_batch_size=32",
                "actor_rollout_ref.actor.ppo_mini_batch_size=32",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert vp.main([*base, f"data.train_files={tmp_path / 'missing.parquet'}"]) == 2
    assert "cannot be read as parquet" in capsys.readouterr().err
    assert vp.main([*base, f"data.train_files={_rows(tmp_path / 'rl.parquet')}"]) == 0
    # what veRL's loader draws: data.gen_batch_size when set, at most data.train_max_samples rows
    rl = str(tmp_path / "rl.parquet")
    assert vp.main([*base, f"data.train_files={rl}", "+data.gen_batch_size=128"]) == 2
    assert "fewer than one batch of 128" in capsys.readouterr().err
    assert vp.main([*base, f"data.train_files={rl}", "data.train_max_samples=10"]) == 2
    assert "hold 10 usable row(s)" in capsys.readouterr().err
    # files veRL reads another way: a glob of parquet shards (counted), JSONL (not counted here)
    (tmp_path / "shards").mkdir()
    for i in range(2):
        _rows(tmp_path / "shards" / f"{i}.parquet", 32)
    assert vp.main([*base, f"data.train_files='{tmp_path}/shards/*.parquet'"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert vp.main([*base, f"data.train_files='{tmp_path}/none/*.parquet'"]) == 2
    assert "no file matches" in capsys.readouterr().err
    (tmp_path / "rl.jsonl").write_text("{}\n")
    assert vp.main([*base, f"data.train_files={tmp_path / 'rl.jsonl'}"]) == 0
    capsys.readouterr()
    assert vp.main([*base, f"data.train_files={rl}"]) == 0
    # the overlay passes veRL's own validation as the launch scripts compose it (micro-batches set)
    assert "config checked" in capsys.readouterr().out
    for unset in ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=null",):
        assert vp.main([*base, f"data.train_files={tmp_path / 'rl.parquet'}", unset]) == 2
        assert "veRL's own validation (as main_ppo runs it) refuses it" in capsys.readouterr().err
