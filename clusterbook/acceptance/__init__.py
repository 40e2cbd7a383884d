"""The acceptance scenarios (`invoke verify`, `invoke apply`): features, their steps and fixtures, which pytest runs
against a live cluster (the top layer: commands find this folder as package data, pure/packagedata.py)."""
