"""The golden text: its one writer and reader, folding views, and the upgrade rule."""
