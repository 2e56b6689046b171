r"""tau_env's GRPO pieces registered in veRL 0.9.x: the leave-one-out estimator, the agent loop, and the
mapping of the importance-sampling correction and the rollout mask onto veRL's rollout-correction settings.

What is registered, and where (importing this module does it):

- ``algorithm.adv_estimator=tau_loo``: the leave-one-out advantage of
  :func:`tau_env.reference_trainers.objectives.group_loo_advantages` (:math:`A(g) = (R(g) - b(g)) /
  \sigma(g)`, ``b`` and ``sigma`` over the other G-1 rewards of the group, no division when
  ``sigma = 0``), broadcast over each rollout's agent tokens. veRL's ``token-mean`` loss then divides
  by the agent-token count of the whole mini-batch.
- ``algorithm.adv_estimator=tau_loo_group`` (the recipe's default): the same advantages, each group's
  rescaled by ``T / (K * N_k)`` (``T`` the batch's agent tokens, ``K`` its groups, ``N_k`` group k's
  agent tokens) so that veRL's ``token-mean`` over the batch becomes the issue's per-group
  normalisation: the mean over groups of (sum of the group's token terms / the group's agent-token
  count). A positive factor commutes with the clipped ``min`` (and with veRL's dual clip), so this is
  exact when one mini-batch is the whole batch (``ppo_mini_batch_size == data.train_batch_size``, as
  the overlay sets) and approximate with several mini-batches.
- ``rollout.agent`` loop ``tau_agent``: :class:`tau_env.reference_trainers.verl_agent_loop.TauAgentLoop`.

How each part of the objective maps (``objectives.grpo_loss`` is the reference):

=====================================  ==========================================================================
objective                              veRL 0.9.1
=====================================  ==========================================================================
clipped surrogate, eps                 ``actor.policy_loss.loss_mode=vanilla``, ``clip_ratio_low/high=eps``,
                                       ``clip_ratio_c`` huge (dual clip off) -- veRL's code
w = min(pi_old / pi_rollout, C)        ``algorithm.rollout_correction.rollout_is=token``,
                                       ``rollout_is_threshold=C`` -- veRL's code, same equation (veRL also
                                       clamps the log-ratio at +-20 before exp, which never binds for C < e^20)
m(g): exp(mean log w) in [1-d, 1+d]    ``rollout_rs=seq_mean_k1``, ``rollout_rs_threshold="1/(1+d)_1/(1-d)"``
                                       -- veRL's code: its k1 statistic is mean(log pi_rollout - log pi_old) =
                                       -mean log w, so the band is inverted (:func:`rollout_correction`)
LOO advantage                          ``tau_loo`` / ``tau_loo_group`` -- our code (veRL's ``rloo`` has no
                                       sigma, its ``grpo`` uses all G rewards)
per-group token normalisation          ``tau_loo_group`` -- our code (veRL's ``token-mean`` is per mini-batch)
zero gradient for equal rewards        automatic: A = 0
=====================================  ==========================================================================

One known difference: veRL applies the rollout mask by zeroing the rejected rollouts' ``response_mask``
before the advantage is computed, so ``N_k`` in ``tau_loo_group`` counts only the group's kept
rollouts' tokens, whereas ``objectives.grpo_loss`` keeps masked rollouts' tokens in the denominator.
They agree whenever no rollout of a group is masked. Rejected rollouts' rewards still enter the
group's baseline (rewards reach the estimator through ``token_level_rewards``, which the mask does
not touch), as in ``grpo_loss``.

Loading in every veRL process: ``import verl`` imports the entry points of the ``verl.plugins`` group
(``VERL_USE_EXTERNAL_PLUGINS=auto``, the default), so the distribution declares::

    [project.entry-points."verl.plugins"]
    tau_env = "tau_env.reference_trainers.verl_plugins"

Without it (or with ``VERL_USE_EXTERNAL_PLUGINS=none``), ``export
VERL_USE_EXTERNAL_MODULES=tau_env.reference_trainers.verl_plugins`` before the launcher (and before
``ray start`` on every node) does the same. veRL swallows plugin import errors, so the launch scripts
run ``python -m tau_env.reference_trainers.verl_plugins --config ...`` first: it raises
(:class:`PluginNotRegistered`) when the names are missing or the config's correction settings are
not the recipe's; :class:`~tau_env.reference_trainers.verl_agent_loop.TauAgentLoop` checks again in
every rollout worker.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tau_env.reference_trainers.objectives import group_loo_advantages

from tau_env.error import DependencyNotInstalled, Error, InvalidOptionError, one_line


def _external_module_failure(e: ImportError) -> str | None:
    """What to say when ``import verl`` failed on a module ``VERL_USE_EXTERNAL_MODULES`` names (veRL
    imports each one as it starts, so a misspelt name reads as veRL missing); None otherwise.
    """
    import importlib.util
    import os

    try:
        if importlib.util.find_spec("verl") is None:  # veRL itself is missing, whatever the list says
            return None
    except (ImportError, ValueError):
        return None
    listed = [m.strip() for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m.strip()]
    missing = getattr(e, "name", None) or ""
    for module in listed:
        if missing and (module == missing or module.startswith(missing + ".")):
            return (
                f"VERL_USE_EXTERNAL_MODULES names {module!r}, which does not import ({e}); "
                "tau_env's plugin is tau_env.reference_trainers.verl_plugins"
            )
    return None


try:
    from verl.trainer.ppo import core_algos
except ImportError as e:  # the start-up command run where veRL is not installed: one line, not a traceback
    _misnamed = _external_module_failure(e)
    if __name__ == "__main__":
        import sys

        _why = _misnamed or f"veRL is not importable here ({e})"
        sys.stderr.write(f"python -m tau_env.reference_trainers.verl_plugins: error: {one_line(_why)}\n")
        raise SystemExit(2) from None
    raise DependencyNotInstalled(
        _misnamed or f"tau_env's veRL plugin needs veRL (pip install 'verl==0.9.1' in its own venv): {e}"
    ) from e

ESTIMATOR = "tau_loo"
GROUP_ESTIMATOR = "tau_loo_group"
AGENT_LOOP = "tau_agent"
ESTIMATORS = (ESTIMATOR, GROUP_ESTIMATOR)


class PluginNotRegistered(Error):
    """veRL does not know tau_env's estimator or agent loop, or the config does not use them as the recipe says."""


def _rewards(token_level_rewards: torch.Tensor) -> torch.Tensor:
    # the outcome reward sits on one position of each row; veRL's grpo reads it the same way
    return token_level_rewards.sum(dim=-1)


def _index_keys(index: Any, n: int) -> list[Any]:
    if index is None:
        raise InvalidOptionError(
            "The leave-one-out estimator needs the group index (veRL's uid): got none; veRL passes it when "
            "the batch has a 'uid' column, which its trainers add for rollout.n > 1."
        )
    keys = index.tolist() if isinstance(index, (np.ndarray, torch.Tensor)) else list(index)
    if len(keys) != n:
        raise InvalidOptionError(f"index: expected {n} group keys (one per row), got {len(keys)}.")
    return keys


def loo_token_advantages(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any) -> torch.Tensor:
    """The LOO advantage of each row's group, on the row's agent tokens (0 elsewhere)."""
    keys = _index_keys(index, token_level_rewards.shape[0])
    adv = group_loo_advantages(_rewards(token_level_rewards).float(), keys)
    return adv.unsqueeze(-1).to(token_level_rewards.dtype) * response_mask.to(token_level_rewards.dtype)


def group_token_scale(response_mask: torch.Tensor, index: Any) -> torch.Tensor:
    """``T / (K * N_k)`` per row (see the module's docstring); 0 for a group without agent tokens."""
    keys = _index_keys(index, response_mask.shape[0])
    tokens = response_mask.sum(dim=-1).double()
    total = float(tokens.sum())
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    scale = torch.zeros(len(keys), dtype=torch.float64)
    for rows in groups.values():
        n_k = float(tokens[rows].sum())
        if n_k > 0:
            scale[rows] = total / (len(groups) * n_k)
    return scale


def _register_estimator(name: str) -> Any:
    """VeRL's ``register_adv_est``, tolerating this module imported twice (``python -m`` runs it as ``__main__``)."""

    def decorator(fn: Any) -> Any:
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and getattr(existing, "__qualname__", None) == fn.__qualname__:
            if existing.__module__ in (_MODULE, "__main__"):
                return existing
        return core_algos.register_adv_est(name)(fn)

    return decorator


_MODULE = "tau_env.reference_trainers.verl_plugins"


@_register_estimator(ESTIMATOR)
def compute_tau_loo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """VeRL estimator ``tau_loo``: leave-one-out advantages on agent tokens; returns ``(advantages, returns)``."""
    with torch.no_grad():
        adv = loo_token_advantages(token_level_rewards, response_mask, index)
    return adv, adv


@_register_estimator(GROUP_ESTIMATOR)
def compute_tau_loo_group_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """VeRL estimator ``tau_loo_group``: ``tau_loo`` scaled so veRL's token-mean is the per-group normalisation."""
    with torch.no_grad():
        adv = loo_token_advantages(token_level_rewards, response_mask, index)
        adv = adv * group_token_scale(response_mask, index).to(adv.dtype).unsqueeze(-1)
    return adv, adv


def rollout_correction(is_cap: float = 2.0, mask_delta: float = 0.1) -> dict[str, Any]:
    """VeRL's ``algorithm.rollout_correction`` settings for ``w = min(pi_old/pi_rollout, C)`` and the mask ``m(g)``.

    veRL keeps a rollout iff ``lower <= exp(mean(log pi_rollout - log pi_old)) <= upper``; ours keeps it
    iff ``1 - delta <= exp(mean(log pi_old - log pi_rollout)) <= 1 + delta``, so ``lower = 1/(1+delta)``
    and ``upper = 1/(1-delta)`` (``delta >= 1``: no upper bound, given as 1e30).
    """
    if not (is_cap > 0 and math.isfinite(is_cap)):
        raise InvalidOptionError(f"is_cap must be a finite number > 0, got {is_cap!r}.")
    if not (mask_delta >= 0 and math.isfinite(mask_delta)):
        raise InvalidOptionError(f"mask_delta must be a finite number >= 0, got {mask_delta!r}.")
    lower = 1.0 / (1.0 + mask_delta)
    upper = 1.0 / (1.0 - mask_delta) if mask_delta < 1 else 1e30
    return {
        "rollout_is": "token",
        "rollout_is_threshold": float(is_cap),
        "rollout_rs": "seq_mean_k1",
        "rollout_rs_threshold": f"{lower!r}_{upper!r}",
        "rollout_is_batch_normalize": False,
        "bypass_mode": False,
    }


def registered() -> dict[str, bool]:
    """Which of tau_env's names veRL's registries hold in this process."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    return {
        **{name: name in core_algos.ADV_ESTIMATOR_REGISTRY for name in ESTIMATORS},
        AGENT_LOOP: AGENT_LOOP in _agent_loop_registry,
    }


def require_registered() -> None:
    """Raise :class:`PluginNotRegistered` unless veRL knows ``tau_loo``, ``tau_loo_group`` and ``tau_agent``."""
    missing = [name for name, ok in registered().items() if not ok]
    if missing:
        raise PluginNotRegistered(
            f"veRL does not know {', '.join(missing)}: the tau_env plugin was not imported in this process. "
            "Install tau-env with its verl.plugins entry point (pip install -e . in the veRL environment) or "
            "export VERL_USE_EXTERNAL_MODULES=tau_env.reference_trainers.verl_plugins, and check that "
            "VERL_USE_EXTERNAL_PLUGINS is not 'none'."
        )


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) or hasattr(node, "get") else None
        if node is None:
            return None
    return node


def check_config(cfg: Any, *, is_cap: float | None = None, mask_delta: float | None = None) -> None:
    """Raise :class:`PluginNotRegistered` when a composed veRL config does not run the recipe's GRPO.

    Checks that the estimator and the agent loop are ours and registered, that the rollout log-probabilities
    are returned, and that the rollout correction is the token IS weight plus the ``seq_mean_k1`` mask
    (with the given ``is_cap``/``mask_delta``, when given).
    """
    require_registered()
    problems = []
    est = _get(cfg, "algorithm.adv_estimator")
    if est not in ESTIMATORS:
        problems.append(f"algorithm.adv_estimator is {est!r}, expected one of {ESTIMATORS}")
    loop = _get(cfg, "actor_rollout_ref.rollout.agent.default_agent_loop")
    if loop != AGENT_LOOP:
        problems.append(f"actor_rollout_ref.rollout.agent.default_agent_loop is {loop!r}, expected {AGENT_LOOP!r}")
    if _get(cfg, "actor_rollout_ref.rollout.calculate_log_probs") is not True:
        problems.append("actor_rollout_ref.rollout.calculate_log_probs must be true (pi_rollout for the IS weight)")
    rc = _get(cfg, "algorithm.rollout_correction") or {}
    if rc.get("rollout_is") != "token" or rc.get("rollout_rs") != "seq_mean_k1" or rc.get("bypass_mode"):
        problems.append(
            "algorithm.rollout_correction must have rollout_is=token, rollout_rs=seq_mean_k1 and bypass_mode=false, "
            f"got rollout_is={rc.get('rollout_is')!r}, rollout_rs={rc.get('rollout_rs')!r}, "
            f"bypass_mode={rc.get('bypass_mode')!r}"
        )
    if is_cap is not None or mask_delta is not None:
        want = rollout_correction(2.0 if is_cap is None else is_cap, 0.1 if mask_delta is None else mask_delta)
        for key in ("rollout_is_threshold", "rollout_rs_threshold"):
            got = rc.get(key)
            try:
                if key == "rollout_is_threshold" and is_cap is not None and float(got) != want[key]:
                    problems.append(f"algorithm.rollout_correction.{key} is {got!r}, expected {want[key]!r}")
                if key == "rollout_rs_threshold" and mask_delta is not None:
                    lo, hi = (float(x) for x in str(got).split("_"))
                    wlo, whi = (float(x) for x in want[key].split("_"))
                    if not (math.isclose(lo, wlo, rel_tol=1e-6) and math.isclose(hi, whi, rel_tol=1e-6)):
                        problems.append(f"algorithm.rollout_correction.{key} is {got!r}, expected {want[key]!r}")
            except (TypeError, ValueError):  # null, one number where the band needs two, text
                problems.append(f"algorithm.rollout_correction.{key} is {got!r}, expected {want[key]!r}")
    problems += _threshold_problems(rc)
    problems += agent_loop_file_problems(_get(cfg, "actor_rollout_ref.rollout.agent.agent_loop_config_path"))
    problems += _data_problems(cfg)
    problems += _verl_validation_problems(cfg)
    n = _get(cfg, "actor_rollout_ref.rollout.n")
    if n is not None and not (isinstance(n, int) and n >= 2):
        problems.append(
            f"actor_rollout_ref.rollout.n is {n!r}: a group needs at least 2 rollouts (with one, every leave-one-out "
            "advantage is 0 and nothing is learnt)"
        )
    if problems:
        raise PluginNotRegistered("The veRL config does not run tau_env's GRPO: " + "; ".join(problems) + ".")


def _data_problems(cfg: Any) -> list[str]:
    """Whether ``data.train_files`` (local parquet files) hold a whole ``data.train_batch_size`` of rows:
    veRL's loader drops the last partial batch, so fewer rows run 0 steps (and end in a
    ZeroDivisionError once Ray, vLLM and the model have started). Remote paths are not read.
    """
    import glob

    files = _get(cfg, "data.train_files")
    batch = _get(cfg, "data.gen_batch_size") or _get(cfg, "data.train_batch_size")  # what veRL's loader draws
    if not files or isinstance(batch, bool) or not isinstance(batch, int):
        return []
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return []
    rows = 0
    for given in [files] if isinstance(files, str) else [str(f) for f in files]:
        if "://" in given:  # hdfs://, s3://: veRL copies them down itself
            return []
        # a pattern, unless a file has that very name (a folder "run [1]" holds brackets, no pattern)
        literal = not glob.has_magic(given) or os.path.exists(given)
        paths = [given] if literal else sorted(glob.glob(given))
        if not paths:
            return [f"data.train_files {given}: no file matches"]
        for path in paths:
            if path.endswith((".json", ".jsonl")):  # veRL reads these too: rows not counted here
                return []
            try:
                rows += pq.ParquetFile(path).metadata.num_rows
            except Exception as e:  # missing, not parquet (pyarrow's ArrowInvalid), unreadable
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                return [f"data.train_files {path}: cannot be read as parquet ({first[:160]})"]
    cap = _get(cfg, "data.train_max_samples")
    if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
        rows = min(rows, cap)  # veRL keeps that many rows
    if rows < batch:
        return [
            f"data.train_files hold {rows} usable row(s) (data.train_max_samples counted), fewer than one batch of "
            f"{batch} (data.gen_batch_size, else data.train_batch_size): veRL drops a last partial batch, so the run "
            f"would make no step; set data.train_batch_size and actor_rollout_ref.actor.ppo_mini_batch_size to "
            f"{rows} or less, or write rows of more tasks (python -m tau_env.reference_trainers.verl_data rl ENV OUT "
            "--tasks a synthesis run's file)"
        ]
    return []


def _verl_validation_problems(cfg: Any) -> list[str]:
    """What veRL's own ``validate_config`` (as ``main_ppo`` runs it after the workers are placed)
    refuses in the composed config, said before any worker starts.
    """
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
    except ImportError:  # another veRL layout: main_ppo says it
        return []
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as e:  # its checks are asserts and ValueErrors
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return [f"veRL's own validation (as main_ppo runs it) refuses it: {first[:300]}"]
    return []


def _threshold_problems(rc: Mapping[str, Any]) -> list[str]:
    """What in ``algorithm.rollout_correction`` is no threshold of the recipe's equations, whatever
    their values: the cap C a finite number above 0, the mask's band ``LOWER_UPPER`` around 1
    (``LOWER <= 1 <= UPPER``), no batch normalization of the weights (another objective).
    """
    out = []
    cap = rc.get("rollout_is_threshold")
    try:
        ok = cap is not None and not isinstance(cap, bool) and math.isfinite(float(cap)) and float(cap) > 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        out.append(f"algorithm.rollout_correction.rollout_is_threshold is {cap!r}, expected the cap C: a number > 0")
    band = rc.get("rollout_rs_threshold")
    try:
        lo, hi = (float(x) for x in str(band).split("_"))
        ok = 0 < lo <= 1 <= hi and math.isfinite(lo)
    except ValueError:
        ok = False
    if not ok:
        out.append(
            f"algorithm.rollout_correction.rollout_rs_threshold is {band!r}, expected the mask's band 'LOWER_UPPER' "
            "with 0 < LOWER <= 1 <= UPPER (rollout_correction(is_cap, mask_delta) gives it)"
        )
    if rc.get("rollout_is_batch_normalize"):
        out.append("algorithm.rollout_correction.rollout_is_batch_normalize must be false (it changes the objective)")
    return out


def agent_loop_file_problems(path: Any) -> list[str]:
    """What keeps veRL's workers from building the tau_agent loop from the agent-loop YAML at ``path``
    (``actor_rollout_ref.rollout.agent.agent_loop_config_path``; unset: the loop as registered, with
    its defaults, nothing to check): a file that is missing or no YAML
    list, no ``tau_agent`` entry, or settings the loop refuses (a misspelt key, an unknown family or
    user kind), found now rather than when the workers start.
    """
    from omegaconf import OmegaConf
    from tau_env.reference_trainers.verl_agent_loop import LOOP_SETTINGS, _check_loop_settings

    where = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    if not path:  # the loop as registered, with its defaults
        return []
    try:  # as veRL's workers read it: OmegaConf (its YAML numbers, its ${...} interpolations resolved)
        entries = OmegaConf.to_container(OmegaConf.load(str(path)), resolve=True)
    except Exception as e:  # missing, unreadable, no YAML, an interpolation that does not resolve
        return [f"{where} {path}: cannot be read as YAML ({str(e).splitlines()[0] if str(e) else type(e).__name__})"]
    ours = (
        [e for e in entries if isinstance(e, dict) and e.get("name") == AGENT_LOOP] if isinstance(entries, list) else []
    )
    if not ours:
        return [f"{where} {path}: no entry named {AGENT_LOOP!r} (a YAML list of agent loops)"]
    if len(ours) > 1:  # veRL keeps the last: a check of the first would pass what runs
        return [f"{where} {path}: {len(ours)} entries named {AGENT_LOOP!r}; keep one"]
    entry = ours[0]
    target = "tau_env.reference_trainers.verl_agent_loop.TauAgentLoop"
    if entry.get("_target_") != target:  # veRL builds the entry's _target_; without it, no loop at all
        return [f"{where} {path}: the {AGENT_LOOP!r} entry's _target_ is {entry.get('_target_')!r}, not {target!r}"]
    settings = {k: v for k, v in entry.items() if k not in ("name", "_target_")}
    VALUE_SETTINGS = ("user_model", "max_new_tokens", "loop_limit", "user_temperature")  # noqa: N806
    unknown = sorted(k for k in settings if k not in LOOP_SETTINGS)
    try:
        _check_loop_settings(
            {k: settings[k] for k in unknown},
            family=settings.get("family", "auto"),
            user=settings.get("user", "scripted"),
            **{k: settings[k] for k in VALUE_SETTINGS if k in settings},
            **({} if "user_model" in settings else {"user_model": None}),  # the loop's default
        )
    except InvalidOptionError as e:
        return [f"{where} {path}: {e}"]
    if unknown:  # the file holds the loop's settings only (veRL's own reach the loop otherwise): not ignored
        return [
            f"{where} {path}: {', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} no setting of the "
            f"tau_agent loop (its settings: {', '.join(LOOP_SETTINGS)})"
        ]
    return []


def _register_agent_loop() -> None:
    # the agent loop registers itself on import (veRL's @register)
    from tau_env.reference_trainers import verl_agent_loop  # noqa: F401


_register_agent_loop()


def main(argv: list[str] | None = None) -> int:
    """``python -m tau_env.reference_trainers.verl_plugins [--config-dir D --config-name N [overrides...]]``.

    Checks the registrations in a fresh ``import verl`` (as veRL's workers get them) and, with a config,
    composes it as veRL's launcher would and checks it (:func:`check_config`).
    """
    p = argparse.ArgumentParser(prog="python -m tau_env.reference_trainers.verl_plugins", description=main.__doc__)
    p.add_argument("--config-dir", help="the folder holding the overlay (reference_trainers/configs)")
    p.add_argument("--config-name", default="tau_grpo", help="the overlay's name (default tau_grpo)")
    p.add_argument("--is-cap", type=float, default=None)
    p.add_argument("--mask-delta", type=float, default=None)
    p.add_argument("overrides", nargs="*", help="Hydra overrides, as given to verl.trainer.main_ppo")
    args = p.parse_args(argv)
    import sys

    try:
        fresh = registered_in_fresh_process()  # this process imported the plugin itself: its registries prove nothing
        missing = [name for name, ok in fresh.items() if not ok]
        if missing:
            raise PluginNotRegistered(
                f"a fresh veRL process (import verl, as every worker starts) does not know {', '.join(missing)}: the "
                "tau_env plugin is not loaded there. Install tau-env with its verl.plugins entry point (pip install "
                "-e . in the veRL environment) or export VERL_USE_EXTERNAL_MODULES=tau_env.reference_trainers."
                "verl_plugins, and check that VERL_USE_EXTERNAL_PLUGINS is not 'none'."
            )
        if args.config_dir:
            try:
                cfg = compose_config(args.config_dir, args.config_name, args.overrides)
            except Exception as e:  # Hydra's and OmegaConf's errors: an unknown key, a bad folder or name
                if type(e).__module__.split(".")[0] not in ("hydra", "omegaconf"):
                    raise
                first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise InvalidOptionError(f"the veRL config does not compose: {first}") from None
            check_config(cfg, is_cap=args.is_cap, mask_delta=args.mask_delta)
    except Error as e:
        sys.stderr.write(f"{p.prog}: error: {one_line(e)}\n")
        return 2
    sys.stdout.write(
        f"tau_env veRL plugins registered in a fresh veRL process: {', '.join(fresh)}"
        + ("; config checked\n" if args.config_dir else "\n")
    )
    return 0


def registered_in_fresh_process() -> dict[str, bool]:
    """:func:`registered` in a new Python process that only imports ``verl`` (with this process's
    environment), as each veRL worker starts: whether the entry point (or ``VERL_USE_EXTERNAL_MODULES``)
    really loads the plugin there.
    """
    import json
    import subprocess
    import sys

    code = (
        "import json, verl\n"
        "from verl.trainer.ppo import core_algos\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry as loops\n"
        f"names = {list(ESTIMATORS)!r}\n"
        "out = {n: n in core_algos.ADV_ESTIMATOR_REGISTRY for n in names}\n"
        f"out[{AGENT_LOOP!r}] = {AGENT_LOOP!r} in loops\n"
        "print(json.dumps(out))\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise PluginNotRegistered("a fresh veRL process did not import verl within 600 s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PluginNotRegistered(f"a fresh veRL process could not start: {tail}")
    for line in reversed(done.stdout.strip().splitlines()):  # a plugin may print; the answer is the last JSON line
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    raise PluginNotRegistered("a fresh veRL process gave no answer (no JSON line on its output)")


def compose_config(config_dir: str, config_name: str = "tau_grpo", overrides: list[str] | None = None) -> Any:
    """The config veRL's ``main_ppo`` would run for ``--config-path config_dir --config-name config_name``."""
    import os

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.abspath(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides or []))


if __name__ == "__main__":
    raise SystemExit(main())
