"""Serve, the top layer: the Ray Serve app (verifier ensemble and policy scoring behind REST), its API
schemas, and the ``far`` command line assembled from every layer's commands.

May import every other package; nothing imports serve.
"""
