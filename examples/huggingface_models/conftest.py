"""Registers this folder's marker, so the folder runs as copied, also under --strict-markers."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "transformers: tiny Hugging Face transformers models built in code"
    )
