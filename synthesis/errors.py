"""The synthesis pipeline's exception."""

from __future__ import annotations

from tau_env.error import Error


class SynthesisError(Error):
    """A synthesis run cannot go on (bad settings, a broken run folder, a model that never answers usably)."""
