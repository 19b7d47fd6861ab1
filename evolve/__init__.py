"""FATE (``far evolve``): the decision task, the policy model with LoRA, the PFPO objective, the rounds of
failures -> repairs -> Pareto choice -> SFT -> PFPO; ``run_evolve`` runs them from a config.

May import rollout, verifiers and search's pipeline (``far.search.jobs.pipeline``); never serve or the ``far`` command.
"""
