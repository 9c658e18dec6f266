"""ncu analyses."""
