"""Ray hosting for rollout's models: long-lived actors that load an engine once and serve batches."""
