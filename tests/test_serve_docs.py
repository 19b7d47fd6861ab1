"""far serve's /docs works offline: Swagger UI's assets come from the package, checked in a headless Chromium
that may reach nothing but the service."""
from __future__ import annotations

import socket
import threading
import time

import pytest
from conftest import NEEDS_BROWSER, oracle_models
from far.models.backends import ModelsConfig
from far.serve.app import create_api
from far.serve.backends import LocalBackend
from far.serve.schemas import ServeConfig

pytestmark = NEEDS_BROWSER


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    import uvicorn

    config = ServeConfig(suites={"small": {"name": "edge_cloud", "seed": 5, "size": 120}},
                         output=str(tmp_path_factory.mktemp("serve")),
                         models=ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))
    backend = LocalBackend(config)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_api(lambda: backend), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_docs_render_every_endpoint_with_no_request_leaving_the_machine(service, browser):
    page = browser.new_page()
    outside: list[str] = []

    def only_the_service(route):
        if route.request.url.startswith(service):
            route.continue_()
        else:  # a CDN (or anything else): refused, and remembered
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_service)
    page.goto(f"{service}/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    paths = page.eval_on_selector_all(".opblock-summary-path", "nodes => nodes.map(n => n.textContent.trim())")
    assert {"/v1/score/trajectory", "/v1/score/trajectories", "/v1/score/policy", "/v1/jobs/{job_id}",
            "/v1/healthz", "/v1/suites"} <= {p.replace("\u200b", "") for p in paths}
    assert outside == []
    page.close()
