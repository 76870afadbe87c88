"""The service never touches `random`'s global state: a property-based test
drawing its cases in one thread while the app runs in another (the OpenAPI
fuzz test does) fails when the app moves that state under it."""

from __future__ import annotations

import ast
from pathlib import Path

import app
from app.kit import jitter

APP = Path(app.__file__).parent
# Making a generator of one's own is the point; everything else draws from the global one.
OWN_GENERATORS = {"Random", "SystemRandom"}


def _global_random_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "random"
            and node.attr not in OWN_GENERATORS
        ):
            found.append(f"{path.relative_to(APP.parent)}:{node.lineno}: random.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "random":
            names = {alias.name for alias in node.names}
            if names - OWN_GENERATORS:
                found.append(f"{path.relative_to(APP.parent)}:{node.lineno}: from random import")
    return found


def test_no_module_of_the_service_draws_from_the_global_random_state() -> None:
    found = [hit for path in sorted(APP.rglob("*.py")) for hit in _global_random_calls(path)]
    assert found == []


def test_jitter_stays_within_its_bounds_and_spreads() -> None:
    draws = [jitter.uniform(0.5, 1.5) for _ in range(200)]
    assert all(0.5 <= draw <= 1.5 for draw in draws)
    assert len(set(draws)) > 100
