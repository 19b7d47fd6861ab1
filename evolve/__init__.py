"""FATE (``far evolve``): the action task (the model writes the agent's JSON action), the policy model with LoRA,
the PFPO objective, the rounds of failures -> repairs -> Pareto choice -> SFT -> PFPO; ``run_evolve`` runs them
from a config.

May import rollout, models, suites, verifiers and search (not its searchers); never serve or the ``far`` command.
"""
