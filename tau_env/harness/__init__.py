"""The harness: one loop for evaluation, teacher data and rollouts.

``run_episode`` / ``arun_episode`` play one episode; ``evaluate`` / ``aevaluate`` run every
(task, trial) with metrics (pass@1 with its standard error, pass^k), trajectory logs, resume,
the loop rule and infrastructure-error handling.
"""

from tau_env.harness.episode import DEFAULT_LOOP_LIMIT, EpisodeResult, arun_episode, episode_seed, run_episode
from tau_env.harness.metrics import compute_metrics, format_metrics, pass_hat_k
from tau_env.harness.run import EvalRun, aevaluate, evaluate

__all__ = [
    "DEFAULT_LOOP_LIMIT",
    "EpisodeResult",
    "EvalRun",
    "aevaluate",
    "arun_episode",
    "compute_metrics",
    "episode_seed",
    "evaluate",
    "format_metrics",
    "pass_hat_k",
    "run_episode",
]
