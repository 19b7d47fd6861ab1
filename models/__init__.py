"""Model backends: oracle (label-reading) and real edge/cloud/user models, LM engines (transformers, vLLM, HTTP), local
weights and the persistent model-call cache; the backend tables are in ``far.models.backends``.

May import rollout's core (scenario, calls, errors, io, seeding, registry); never far.suites, verifiers
or anything above. A backend module never imports the tables that name it.
"""
