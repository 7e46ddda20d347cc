"""Disclosure-risk attacks of the 2017 independent assessment, run against our own release (no Dagster)."""
