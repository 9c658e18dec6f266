"""trace analyses."""
