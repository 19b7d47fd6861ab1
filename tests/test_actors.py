"""Model actors: a crash mid-call is retried exactly once after the restart; a second crash is a fault."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from far.cluster.actors import ActorLM, start_lm_actor
from far.models.engines import EngineSpec
from far.models.lm import GenerateRequest, messages


class SlowServer:
    """An OpenAI-compatible endpoint that answers after ``delay`` seconds and records each request."""

    def __init__(self, delay):
        self.requests = []
        self.arrived = threading.Semaphore(0)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(time.time())
                server.arrived.release()
                time.sleep(delay)
                payload = json.dumps({"choices": [{"message": {"content": "done"}}]}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client died meanwhile

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def call_in_background(lm):
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=lm.generate(
        [GenerateRequest(messages=messages("s", "u"))])))
    thread.start()
    return thread, box


@pytest.fixture
def slow_actor(ray_local):
    server = SlowServer(delay=3.0)
    spec = EngineSpec(engine="openai", model="m", options={"base_url": server.url, "max_retries": 0,
                                                           "timeout_s": 30})
    handle = start_lm_actor(spec)
    yield server, handle, ActorLM(handle, timeout_s=60)
    ray_local.kill(handle, no_restart=True)
    server.httpd.shutdown()


def test_killed_actor_restarts_and_retries_the_call_once(slow_actor, ray_local):
    server, handle, lm = slow_actor
    pid = ray_local.get(handle.pid.remote())
    thread, box = call_in_background(lm)
    assert server.arrived.acquire(timeout=30)
    ray_local.kill(handle, no_restart=False)
    thread.join(timeout=60)
    (result,) = box["result"]
    assert result.error is None and result.text == "done"
    assert len(server.requests) == 2  # the original and exactly one retry
    assert ray_local.get(handle.pid.remote()) != pid


def test_second_crash_is_reported_as_actor_died(slow_actor, ray_local):
    server, handle, lm = slow_actor
    thread, box = call_in_background(lm)
    assert server.arrived.acquire(timeout=30)
    ray_local.kill(handle, no_restart=False)
    assert server.arrived.acquire(timeout=60)  # the retry reached the server
    ray_local.kill(handle, no_restart=False)
    thread.join(timeout=60)
    (result,) = box["result"]
    assert result.error == "ACTOR_DIED"
    assert len(server.requests) == 2  # no third attempt


def test_actor_call_timeout_is_a_fault(ray_local):
    server = SlowServer(delay=5.0)
    handle = start_lm_actor(EngineSpec(engine="openai", model="m", options={"base_url": server.url}))
    try:
        lm = ActorLM(handle, timeout_s=0.5)
        (result,) = lm.generate([GenerateRequest(messages=messages("s", "u"))])
        assert result.error == "MODEL_TIMEOUT"
    finally:
        ray_local.kill(handle, no_restart=True)
        server.httpd.shutdown()
