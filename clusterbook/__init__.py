"""clusterbook: a cluster file as the single source of truth for a llama.cpp inference cluster."""

__version__ = "0.1.0"
