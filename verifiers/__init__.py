"""Verifiers: the failure taxonomy and rewards, judges, the rule verifier, attribution, z, the ensemble and its
members, FATE's Pareto/feasibility rules.

May import rollout (and nothing else of FAR): never cluster, search, evolve or serve.
"""
