"""A user's own architectures (test package)."""
