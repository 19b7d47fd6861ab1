"""Serve: FAR's REST API on Ray Serve (``far serve``), one module per concern:

    app.py             the FastAPI app (create_api) and the Serve application (build_app, app_builder)
    middleware.py      the request checks in front of the routes: body size (413), JSON (422), internal errors
                       (500), as layered ASGI pieces
    auth.py            the bearer token: out of the environment, held as its SHA-256, checked per request (401)
    scoring.py         POST /v1/score/trajectory(ies)
    policy_scoring.py  POST /v1/score/policy and GET /v1/jobs/{id}; the suites' start-up check
    decide.py          POST /v1/decide: the runtime guard of the config's policy file
    backends.py        what the routes stand on: one Backend per ingress replica, or LocalBackend in process
    deployments.py     the ensemble as Serve deployments (topology: deployments)
    jobs.py            the durable job store; schemas.py the API's schemas and the config; service.py run_service

May import rollout, verifiers, cluster and search (its jobs, ``far.search.jobs``, its results and gate); only the
``far`` command imports serve.
"""
