"""A client for ``tau-env serve``: OpenEnv's own ``EnvClient`` (WebSocket), with the server's token.

Needs ``openenv-core`` (``pip install 'tau-env[openenv]'``)::

    import asyncio
    from tau_env.adapters.openenv_client import TauEnvClient

    async def main():
        async with TauEnvClient("http://127.0.0.1:8000") as env:
            result = await env.reset(task_id="travel_notice_simple", seed=0)
            result = await env.step(tau_env.say("Hello!"))   # or {"content": ..., "tool_calls": [...]}
            return await env.state()                         # step_count, reward, db_digest, ...

    state = asyncio.run(main())

or synchronously, with OpenEnv's wrapper::

    with TauEnvClient("http://127.0.0.1:8000").sync() as env:
        result = env.reset(task_id="travel_notice_simple", seed=0)
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from tau_env.adapters.errors import require
from tau_env.adapters.openenv import TOKEN_ENV, is_loopback

require("openenv.core.env_client", "openenv", "tau_env.adapters.openenv_client")

from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402


class TauEnvClient(EnvClient[dict[str, Any], dict[str, Any], dict[str, Any]]):
    """OpenEnv's ``EnvClient`` for a tau-env server: actions are assistant messages (dicts), results dicts.

    Args:
        base_url: The server, ``http://host:port`` (or ``ws://``).
        token: The server's token; ``$TAU_ENV_SERVE_TOKEN`` if None (none sent if that is unset too).
        **kwargs: ``EnvClient``'s (``connect_timeout_s``, ``message_timeout_s``, ``max_message_size_mb``).
    """

    def __init__(self, base_url: str, *, token: str | None = None, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)

    async def connect(self) -> TauEnvClient:
        """Open the WebSocket, sending the token (OpenEnv's own ``connect`` sends no headers)."""
        if self._ws is not None:
            return self
        from websockets.asyncio.client import connect

        host = urlparse(self._ws_url).hostname or ""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            self._ws = await connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_message_size,
                additional_headers=headers,
                proxy=None if is_loopback(host) else True,
            )
        except Exception as e:
            raise ConnectionError(f"Failed to connect to {self._ws_url}: {e}") from e
        return self

    def _step_payload(self, action: Any) -> dict[str, Any]:
        return action.model_dump(exclude_none=True) if hasattr(action, "model_dump") else dict(action)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[dict[str, Any]]:
        return StepResult(
            observation=payload.get("observation", {}), reward=payload.get("reward"), done=payload.get("done", False)
        )

    def _parse_state(self, payload: dict[str, Any]) -> dict[str, Any]:
        return payload


__all__ = ["TauEnvClient"]
