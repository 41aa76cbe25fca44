"""Trace a model with its options: build it, set up the facets, record, hand back a Trace."""
