"""The acceptance steps, one module per feature; the conftest imports them all, so pytest-bdd finds every step."""
