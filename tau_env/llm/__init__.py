"""Model servers in either seat: an async OpenAI-compatible client, LLM agent and user policies.

The default client transport needs only the standard library; ``ChatClient(backend="openai")``
needs the ``llm`` extra (the ``openai`` package), which ``import tau_env`` never loads.
"""

from tau_env.llm.cache import ResponseCache
from tau_env.llm.client import ChatClient, InfrastructureError, Sampling, Usage
from tau_env.llm.parsing import parse_text_tool_calls, strip_reasoning, to_action
from tau_env.llm.policies import LLMAgent, LLMUser


def __getattr__(name: str):  # the local backend imports torch: only when asked for
    if name == "TransformersClient":
        from tau_env.llm.local import TransformersClient

        return TransformersClient
    raise AttributeError(name)


__all__ = [
    "ChatClient",
    "InfrastructureError",
    "LLMAgent",
    "LLMUser",
    "ResponseCache",
    "Sampling",
    "Usage",
    "parse_text_tool_calls",
    "strip_reasoning",
    "to_action",
]
