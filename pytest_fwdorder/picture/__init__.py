"""Golden text -> a picture (layout, then SVG). Pure, no torch."""
