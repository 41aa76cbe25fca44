"""What people read besides the failure: HTML, CI reports, and git reviews."""
