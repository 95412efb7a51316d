"""numpy kernel implementations, one module per op family."""
