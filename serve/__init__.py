"""Serve: the Ray Serve app (verifier ensemble and policy scoring behind REST), its API schemas, the job
store, and ``run_service`` (``far serve``).

May import rollout, verifiers, cluster and search's pipeline (``far.search.jobs.pipeline``); only the ``far`` command
imports serve.
"""
