"""Imported first by the ``train`` extra's commands: torch and transformers, or one line saying so."""

from tau_env.reference_trainers._extras import require

require("train", "torch", "transformers")
