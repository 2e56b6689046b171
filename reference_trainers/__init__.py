"""tau_env.reference_trainers: the SFT and GRPO recipe on tau_env episodes.

The objectives in plain PyTorch (``objectives``), the token-in/token-out rollout (``rollout``), a
small readable trainer for a CPU (``sft``, ``grpo``) and the veRL integration for GPUs and clusters
(``verl``). Install with the ``train`` extra (and ``verl`` for veRL); ``import tau_env`` never
imports this package.
"""
