"""Build and trace a model on the meta device: no memory, the same golden."""
