"""Facets: what a trace can record besides the calls (costs, values, operations, ...)."""
