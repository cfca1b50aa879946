"""stockade."""
