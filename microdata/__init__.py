"""Shared vocabulary: domains, datasets, geography, sources, queries and their exact answers."""
