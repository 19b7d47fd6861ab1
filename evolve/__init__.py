"""FATE (``far evolve``): the decision task, the policy model with LoRA, the PFPO objective, the rounds of
failures -> repairs -> Pareto choice -> SFT -> PFPO.

May import rollout, verifiers and search (its config and report helpers); never serve.
"""
