"""Hypothesis profiles: ``quick`` for a developer's loop, ``thorough`` for CI.

CI (``CI`` set in the environment) loads ``thorough``; elsewhere ``quick`` is the default.
``pytest --hypothesis-profile=thorough`` (or ``quick``) chooses either explicitly.
"""

from __future__ import annotations

import os

from hypothesis import settings

THOROUGH_EXAMPLES = 100
"""The ``max_examples`` of the thorough profile; property tests scale their counts by it."""

settings.register_profile("thorough", max_examples=THOROUGH_EXAMPLES)
settings.register_profile("quick", max_examples=THOROUGH_EXAMPLES // 10)


def load_default_profile() -> None:
    settings.load_profile("thorough" if os.environ.get("CI") else "quick")
