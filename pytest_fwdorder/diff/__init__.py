"""Two traces or goldens -> aligned calls -> changes -> their words. Pure, no torch."""
