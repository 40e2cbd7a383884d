"""Capacity planner: memory per device, largest context, decode bound, and the plan-based checks."""
