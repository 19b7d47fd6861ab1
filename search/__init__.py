"""Search: the policy space, evaluation, ranking, the deployment gate and the ``far`` command line."""
