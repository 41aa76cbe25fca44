"""Goldens in a pytest session: the syrupy extension and what a run kept."""
