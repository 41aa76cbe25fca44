"""Run a model's forward once under hooks and record every call: the only stage that hooks modules."""
