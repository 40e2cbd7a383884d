"""Layer 2, the pure layer: topology, flags, planner, renderers, runbook expansion, docs pages. No I/O."""
