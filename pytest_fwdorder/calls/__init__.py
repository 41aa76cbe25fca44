"""The typed records of a forward pass: calls, their values and what facets add; no torch."""
