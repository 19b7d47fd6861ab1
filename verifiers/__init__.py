"""Verifiers: the failure taxonomy, rewards, z vectors, attribution and (later) the ensemble."""
