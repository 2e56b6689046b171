"""``python -m tau_env.reference_trainers.verl_launch B64``: veRL's ``main_ppo`` with the arguments
``B64`` encodes (base64 of a JSON list of strings); ``--encode ARGS...`` prints that encoding.

For ``ray job submit`` (``launch/grpo_ray_cluster.sh``): Ray runs a job's entrypoint through a
shell after joining its words with quotes only around whitespace, so a Hydra override holding a
quote, a comma or parentheses (``data.train_files='/data/run (1)/rl.parquet'``) would not arrive as
written. Base64 holds no character a shell or Hydra reads. ``@tau_env_configs`` in them becomes the
config folder of the tau-env installed where the job runs, so it may be submitted from a machine
whose checkout lies elsewhere.
"""

from __future__ import annotations

import base64
import json
import os
import sys


def encode(args: list[str]) -> str:
    """``args`` as one shell-safe word."""
    return base64.b64encode(json.dumps(list(args)).encode("utf-8")).decode("ascii")


def decode(text: str) -> list[str]:
    """The arguments :func:`encode` gave ``text`` for."""
    args = json.loads(base64.b64decode(text.encode("ascii"), validate=True).decode("utf-8"))
    if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
        raise ValueError("not an encoded argument list")
    return args


#: Stands, in the encoded arguments, for this package's config overlays as installed where the job
#: runs (the head node), not where it was submitted from (a laptop's checkout).
CONFIGS_MARK = "@tau_env_configs"


def configs_dir() -> str:
    """The config overlays (``tau_grpo.yaml``, ``tau_agent_loop.yaml``) of the installed package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def resolve_marks(args: list[str]) -> list[str]:
    """``args`` with :data:`CONFIGS_MARK` replaced by :func:`configs_dir`."""
    return [a.replace(CONFIGS_MARK, configs_dir()) for a in args]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--encode"]:
        sys.stdout.write(encode(argv[1:]) + "\n")
        return 0
    if len(argv) != 1:
        sys.stderr.write(f"usage: python -m {__spec__.name if __spec__ else 'verl_launch'} B64 | --encode ARGS...\n")
        return 2
    try:
        args = decode(argv[0])
    except ValueError as e:
        sys.stderr.write(f"verl_launch: error: {argv[0][:40]!r} is not an encoded argument list ({e})\n")
        return 2
    os.execvp(sys.executable, [sys.executable, "-m", "verl.trainer.main_ppo", *resolve_marks(args)])
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
