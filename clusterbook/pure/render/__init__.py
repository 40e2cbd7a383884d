"""Renderers: the cluster model -> generated files (systemd units, scripts, configs); pure, no I/O."""
