"""Offering a toy facet from outside the package, as a third-party plugin would: a plugin
object with the `pytest_fwdorder_facets` hook, registered for the length of one test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest


class FacetPlugin:
    """A plugin whose facets hook offers one facet."""

    def __init__(self, facet: object) -> None:
        self.facet = facet

    def pytest_fwdorder_facets(self) -> list[object]:
        return [self.facet]


@contextmanager
def offered(config: pytest.Config, facet: object) -> Iterator[object]:
    """`facet` offered by a plugin registered with `config` until the block ends."""
    plugin = FacetPlugin(facet)
    config.pluginmanager.register(plugin)
    try:
        yield facet
    finally:
        config.pluginmanager.unregister(plugin)
