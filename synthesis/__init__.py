"""tau_env.synthesis: verified training tasks from a domain's documents and tools.

Install with the ``synth`` extra (``pip install 'tau-env[synth]'``); ``import tau_env`` never
imports this package.
"""
