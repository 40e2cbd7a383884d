"""Layer 1, the model: the cluster and runbook files' schema, loading with lines, rules, and derived facts."""
