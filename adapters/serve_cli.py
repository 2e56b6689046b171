"""``tau-env serve DOMAIN``: the OpenEnv server of :mod:`tau_env.adapters.openenv` on the command line.

``tau_env.cli`` adds it with :func:`add_parser` (as it adds ``synth``). The token never travels on
the command line (where ``ps`` and shell history show it): ``$TAU_ENV_SERVE_TOKEN`` or
``--token-file``.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from tau_env.cli import echo as _out
from tau_env.cli import float_type as _float
from tau_env.cli import int_type as _int
from tau_env.cli import name_type as _name
from tau_env.cli import path_type as _path


class _RefuseToken(argparse.Action):
    """``--token VALUE`` / ``--token=VALUE``: refused with a message that never repeats the value."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        parser.error(
            "--token is not accepted: a token on the command line shows in ps, shell history and logs "
            "(the value given is not repeated here). Put it in $TAU_ENV_SERVE_TOKEN, or in a file whose first "
            "line is the token and pass --token-file FILE"
        )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to ``tau-env``'s subparsers; returns its parser."""
    p = subparsers.add_parser(
        "serve",
        allow_abbrev=False,  # else `--token SECRET` would be taken for `--token-file SECRET`
        help="serve a domain over OpenEnv's reset/step/state protocol (HTTP and WebSocket)",
        description=(
            "Serve DOMAIN to OpenEnv clients: one episode (its own database) per session, the agent seat "
            "played by the client, the user seat by the server. Loopback only unless --host is given, and "
            "then a token is required: put it in $TAU_ENV_SERVE_TOKEN or a file named by --token-file."
        ),
    )
    p.add_argument("domain", type=_name, help="environment id, e.g. harbor-bank-v0")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=_int(0, 65535), default=8000, help="port (default 8000)")
    p.add_argument(
        "--token-file",
        type=_path,
        help="a file whose first line (stripped; the rest is ignored) is the token (else $TAU_ENV_SERVE_TOKEN)",
    )
    p.add_argument("--token", nargs="?", action=_RefuseToken, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", type=_path, help="data folder, for domains loaded from a path (e.g. tau3-banking)")
    p.add_argument("--max-steps", type=_int(1), help="step budget of an episode (default: the domain's)")
    p.add_argument("--max-sessions", type=_int(1), default=256, help="live sessions at most (default 256)")
    p.add_argument(
        "--idle-timeout",
        type=_float(positive=True),
        default=600.0,
        help="seconds an idle session lives (default 600)",
    )
    p.add_argument("--max-request-bytes", type=_int(1), default=1 << 20, help="largest HTTP body (default 1 MiB)")
    p.add_argument("--max-message-bytes", type=_int(1), default=1 << 20, help="largest WebSocket message (1 MiB)")
    p.add_argument("--max-tool-calls", type=_int(1), default=32, help="tool calls per step at most (default 32)")
    p.add_argument(
        "--max-session-bytes",
        type=_int(1),
        default=2 << 20,
        help="bytes (JSON) a session's chat may hold, which every reply carries; beyond: 413, session closed "
        "(default 2 MiB)",
    )
    p.add_argument(
        "--max-connections",
        type=_int(1),
        default=1024,
        help="open connections at most; beyond: 503 and closed (default 1024; lowered to fit the open-file limit)",
    )
    p.add_argument(
        "--header-timeout",
        type=_float(positive=True),
        default=10.0,
        help="seconds a connection has to send a request's head (line and headers); beyond: 408, closed (default 10)",
    )
    p.add_argument(
        "--body-timeout",
        type=_float(positive=True),
        default=30.0,
        help="seconds a request has to send its body; beyond: 408, closed (default 30)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=_float(positive=True),
        default=5.0,
        help="seconds an idle keep-alive connection stays open (default 5)",
    )
    p.add_argument("--user-model", help="play the user seat with this model (default: the scripted user)")
    p.add_argument("--user-base-url", help="the user model's OpenAI-compatible server")
    p.add_argument("--user-api-key-env", default="OPENAI_API_KEY", help="variable holding its key")
    p.add_argument("--user-cache", type=_path, help="a response cache file for the user model")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(fn=cmd_serve)
    return p


def _user(args: argparse.Namespace) -> Any:
    if not args.user_model:
        return None
    from tau_env.llm import ChatClient, LLMUser, ResponseCache

    cache = ResponseCache(args.user_cache) if args.user_cache else None
    return LLMUser(ChatClient(args.user_model, args.user_base_url, api_key_env=args.user_api_key_env, cache=cache))


def options(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of :func:`tau_env.adapters.openenv.serve` for the flags (the token read, the bind checked)."""
    from tau_env.adapters.openenv import ServeLimits, check_bind, load_token

    token = load_token(args.token_file)
    check_bind(args.host, token)
    kw: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "token": token,
        "log_level": args.log_level,
        "user": _user(args),
        "limits": ServeLimits(
            max_request_bytes=args.max_request_bytes,
            max_message_bytes=args.max_message_bytes,
            max_tool_calls=args.max_tool_calls,
            max_sessions=args.max_sessions,
            idle_timeout_s=args.idle_timeout,
            max_session_bytes=args.max_session_bytes,
            max_connections=args.max_connections,
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
            keep_alive_timeout_s=args.keep_alive_timeout,
        ),
    }
    if args.data_dir is not None:
        kw["data_dir"] = str(args.data_dir)
    if args.max_steps is not None:
        kw["max_steps"] = args.max_steps
    return kw


def cmd_serve(args: argparse.Namespace) -> int:
    from tau_env.adapters.errors import require

    for module in ("fastapi", "uvicorn", "websockets"):  # the extra first: no banner for a server that cannot start
        require(module, "openenv", "tau-env serve")
    from tau_env.adapters.openenv import serve

    kw = options(args)
    logging.basicConfig(level=args.log_level.upper())
    auth = "token required" if kw["token"] else "no token: loopback only"
    _out(f"tau-env serve {args.domain}: http://{args.host}:{args.port} (WebSocket /ws; {auth}); Ctrl-C stops.")
    serve(args.domain, **kw)
    return 0
