"""Shared pytest configuration: the repository's `operator/` folder is the package root."""
