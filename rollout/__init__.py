"""Rollouts, the bottom layer: scenario, policy and trajectory types, the LangGraph agent and its replay walk,
model-call records, trajectory I/O; suites live in ``suites/``, model backends in ``models/``.

May import only the standard library and third-party packages: never verifiers, cluster, search, evolve or serve.
"""
