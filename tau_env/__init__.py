"""tau_env: an embeddable two-player environment for post-training conversational agents.

    import tau_env
    env = tau_env.make("harbor-bank-v0")
    env.reset(seed=0)

``import tau_env`` is light (no torch, no model libraries); optional features load their
dependencies when first used.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from tau_env import domains as _domains  # noqa: F401  (registers the built-in domains)
from tau_env import error as error  # the exceptions, e.g. tau_env.error.InvalidOptionError
from tau_env.agents import NoopAgent, OracleAgent, RandomAgent, TeacherAgent
from tau_env.checker import check_domain, check_task
from tau_env.db import EpisodeDB, Schema
from tau_env.domain import Domain, load_domain_dir
from tau_env.env import EpisodeSnapshot, TauEnv, TerminationReason
from tau_env.error import InfrastructureError, ToolError
from tau_env.grading import Grade, Grader
from tau_env.harness import EpisodeResult, aevaluate, arun_episode, evaluate, pass_hat_k, run_episode
from tau_env.knowledge import Document, KnowledgeBase
from tau_env.messages import OUT_OF_SCOPE, STOP, TRANSFER, assistant_message, call, say, tool_call
from tau_env.policy import AsyncPolicy, Observation, Policy
from tau_env.registry import EnvSpec, make, register, registry
from tau_env.tasks import Action, Scenario, Task, load_tasks, save_tasks
from tau_env.tools import Tool, Toolbox, ToolContext, tool
from tau_env.users import ScriptedUser

try:
    __version__ = version("tau-env")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+local"

__all__ = [
    "error",
    "Action",
    "AsyncPolicy",
    "Document",
    "Domain",
    "EnvSpec",
    "EpisodeDB",
    "EpisodeResult",
    "EpisodeSnapshot",
    "Grade",
    "Grader",
    "InfrastructureError",
    "KnowledgeBase",
    "NoopAgent",
    "OUT_OF_SCOPE",
    "Observation",
    "OracleAgent",
    "TeacherAgent",
    "Policy",
    "RandomAgent",
    "STOP",
    "Scenario",
    "Schema",
    "ScriptedUser",
    "TRANSFER",
    "Task",
    "TauEnv",
    "TerminationReason",
    "Tool",
    "ToolContext",
    "ToolError",
    "Toolbox",
    "aevaluate",
    "arun_episode",
    "assistant_message",
    "call",
    "check_domain",
    "check_task",
    "evaluate",
    "load_domain_dir",
    "load_tasks",
    "make",
    "pass_hat_k",
    "register",
    "registry",
    "run_episode",
    "save_tasks",
    "say",
    "tool",
    "tool_call",
]
