"""Run a model once under hooks and fill a Trace: the only stage that touches hooks."""
