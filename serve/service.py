"""``far serve``: start the app on Ray Serve and keep it running. Bad input is a ``FarInputError`` (one line
naming file and field), raised before Ray starts."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from far.rollout.errors import FarInputError


def run_service(config_file: str | Path, *, host: str | None = None, port: int | None = None,
                address: str | None = None, once: bool = False) -> int:
    """``far serve``: the verifier ensemble and policy scoring over REST on Ray Serve (a local Ray, or the
    cluster at ``address`` or ``$RAY_ADDRESS``), until Ctrl-C; with ``once``, start, announce and return (the
    app keeps running on the cluster)."""
    from far.serve.auth import take_token
    from far.serve.decide import check_policy_file
    from far.serve.policy_scoring import check_suites
    from far.serve.schemas import load_serve_config

    config = load_serve_config(config_file).with_absolute_paths()
    if host:
        config = config.model_copy(update={"host": host})
    if port:
        config = config.model_copy(update={"port": port})
    token = take_token(config, config_file)  # before Ray starts: its processes would inherit the token
    base_dir = Path(config_file).resolve().parent
    check_suites(config, base_dir, config_file)
    check_policy_file(config, base_dir, config_file)
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:  # a local Ray starts now, so nothing of ours holds the port yet
        check_port_free(config.host, config.port, config_file)
    from far.cluster.hosting import ensure_ray
    from far.serve.app import build_app
    from ray import serve

    ensure_ray(address)
    existing = running_serve_address()
    if existing is not None and existing != (config.host, config.port):
        raise FarInputError(f"Ray Serve already runs on this cluster at {existing[0]}:{existing[1]} and its address "
                            f"cannot change: serve there (--host {existing[0]} --port {existing[1]}, with a token "
                            "if that is not loopback) or stop it first (`serve shutdown`)", file=config_file,
                            field="host")
    serve.start(http_options={"host": config.host, "port": config.port})

    try:  # Ctrl-C at any point from here, starting up included, stops the app cleanly
        serve.run(build_app(config, token, base_dir), name="far", route_prefix="/")
        auth = "bearer token required" if config.token_required() else "no token (loopback)"
        print(f"FAR serve: http://{config.host}:{config.port}/v1 ({auth}); OpenAPI at /docs; verifiers: "
              f"{', '.join(config.verifier.members)} ({config.verifier.aggregation}). Ctrl-C stops.", flush=True)
        if once:  # started and answered: used by tests and scripts that manage the lifetime themselves
            return 0
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
        print("far serve: stopped", file=sys.stderr)
    return 0


def check_port_free(host: str, port: int, source: str) -> None:
    """A busy port is a one-line error before Ray starts, not a proxy that never comes up."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise FarInputError(f"cannot listen on {host}:{port} ({error.strerror or error}): choose another "
                                "--port or stop what holds it", file=source, field="port") from None


def running_serve_address() -> tuple[str, int] | None:
    """(host, port) of the Ray Serve already running on the connected cluster, or None when none runs."""
    try:
        from ray.serve.context import _get_global_client  # private; Serve only warns and ignores new options
    except ImportError:  # a Ray without this helper: Serve's own warning is all we get
        return None
    client = _get_global_client(raise_if_no_controller_running=False)
    if client is None:
        return None
    http = client.http_config
    return http.host, http.port
