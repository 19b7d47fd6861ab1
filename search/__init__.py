"""Search: the policy space, evaluation, ranking, the deployment gate, Tune searchers, reports, the REST
client, and the evaluate/search/import-scenarios commands.

May import rollout, verifiers and cluster; never evolve or serve.
"""
