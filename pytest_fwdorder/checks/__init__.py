"""Assertions besides the golden: structure, equivalence, checkpoints, budgets."""
