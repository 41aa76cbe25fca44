"""The `fwdorder` command line."""
