"""Layer 5, adapters: the MkDocs plugin (tasks.py and the pytest-bdd steps live at their tools' places)."""
