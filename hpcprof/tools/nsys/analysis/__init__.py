"""nsys analyses."""
