"""Built-in domains, registered when tau_env is imported (registration loads nothing)."""

from tau_env.registry import registry


def _register_builtins() -> None:
    registry.register(
        "harbor-bank-v0",
        "tau_env.domains.harbor_bank:load",
        description="Harbor Bank: the small shipped bank (embedded default and worked example).",
    )


_register_builtins()
