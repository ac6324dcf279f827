"""Presentation: query rows and Prometheus families built from the worker's tables."""
