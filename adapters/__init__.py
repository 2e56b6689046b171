"""tau_env.adapters: tau_env inside the trainers and environment hubs people already use.

Thin bridges, one module per framework, each behind its own extra and importing its framework
lazily; ``import tau_env`` never imports this package.
"""
