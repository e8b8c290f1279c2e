"""The examples in the docstrings of the pure modules run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "trainfleet.scheduling.placement",
        "trainfleet.scheduling.resources",
        "trainfleet.spec.quantity",
        "trainfleet.control.policies",
        "trainfleet.checkpoint",
        "trainfleet.spec.notebook",
        "trainfleet.spec.quicklinks",
    ],
)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
