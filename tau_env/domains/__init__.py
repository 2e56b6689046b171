"""Built-in domains, registered when tau_env is imported (registration loads nothing)."""

from tau_env.registry import registry


def _register_builtins() -> None:
    registry.register(
        "harbor-bank-v0",
        "tau_env.domains.harbor_bank:load",
        description="Harbor Bank: the small shipped bank (embedded default and worked example).",
    )


_register_builtins()


def _register_packs() -> None:
    registry.register(
        "tau3-banking",
        "tau_env.domains.tau3_banking:load",
        description="tau3-banking (tau2-bench banking_knowledge): 97 tasks, 698 documents; needs data_dir=PATH "
        "or $TAU3_BANKING_DATA.",
    )


_register_packs()
