"""stretto."""
