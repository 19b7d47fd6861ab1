"""Rollouts: policies, scenarios and suites, model backends, the LangGraph agent, trajectories."""
