"""Ray hosting for rollout's models and rollouts: long-lived actors that load an engine once and serve
batches, and the rollout pool that fans chunks of scenarios out to actors.

May import rollout and verifiers; never search, evolve or serve.
"""
