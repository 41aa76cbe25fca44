"""Run a model's forward once under hooks and record every call (the recorder's hooks are here)."""
