"""Layer 5, adapters: the MkDocs hooks and macros (tasks.py and the pytest-bdd steps live at their tools' places)."""
