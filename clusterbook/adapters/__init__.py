"""Layer 5, adapters: the MkDocs plugin and invoke's executor (tasks.py and the pytest-bdd steps live at their
tools' places)."""
