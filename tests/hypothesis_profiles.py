"""Hypothesis settings profiles (tests/README.md, "Hypothesis profiles").

`ci`, the default: the same examples on every run (derandomized, no example
database), a fixed number of them, and no deadline, so a slow machine cannot
fail a test by timing. `dev`: random examples, more of them, and the example
database in .hypothesis/, so a failure found once is tried first next time.
HYPOTHESIS_PROFILE=dev picks it.

Loaded from tests/conftest.py, before any test module builds its own
`settings(...)`: those inherit what they do not set from the profile.
"""

from __future__ import annotations

import os

from hypothesis import settings

CI_EXAMPLES = 100
DEV_EXAMPLES = 1000

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=CI_EXAMPLES,
    deadline=None,
    database=None,
)
# The example database is Hypothesis's default one, in .hypothesis/ (git ignores it).
settings.register_profile("dev", max_examples=DEV_EXAMPLES, deadline=None)


def load() -> str:
    """Load the profile HYPOTHESIS_PROFILE names (`ci` if unset); its name."""
    name = os.environ.get("HYPOTHESIS_PROFILE") or "ci"
    settings.load_profile(name)
    return name
