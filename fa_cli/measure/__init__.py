"""Measurements: bench, compare, profile, resources, ladder, sweep."""
