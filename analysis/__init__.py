"""Reads result directories (the shared result schema) into tables and figures (not built yet)."""
