"""``far``: the whole command line, assembled here at the top of the dependency chain -- search's commands
(``evaluate``, ``search``, ``import-scenarios``), ``evolve``, and this package's ``serve``. Bad input prints
one line naming file and field, and exits with status 2."""
from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from rollout.errors import FarInputError




def cmd_serve(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from serve.schemas import MAKE_TOKEN, MIN_TOKEN_LENGTH, load_serve_config

    config = load_serve_config(args.config).with_absolute_paths()
    if args.host:
        config = config.model_copy(update={"host": args.host})
    if args.port:
        config = config.model_copy(update={"port": args.port})
    # the token leaves the environment before Ray starts: Ray's processes inherit it otherwise; only its
    # SHA-256 reaches the replicas
    token = os.environ.pop(config.auth.token_env, None) or None
    if config.token_required() and not token:
        raise FarInputError(f"binding {config.host} (not loopback) needs a bearer token: set "
                            f"${config.auth.token_env} ({MAKE_TOKEN})", file=args.config, field="auth.token_env")
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise FarInputError(f"the token in ${config.auth.token_env} has {len(token)} characters; use at least "
                            f"{MIN_TOKEN_LENGTH} ({MAKE_TOKEN})", file=args.config, field="auth.token_env")
    from serve.app import check_suites

    check_suites(config, Path(args.config).resolve().parent, args.config)
    address = args.address or os.environ.get("RAY_ADDRESS") or None
    if address is None:  # a local Ray starts now, so nothing of ours holds the port yet
        check_port_free(config.host, config.port, args.config)
    from ray import serve

    from cluster.hosting import ensure_ray
    from serve.app import build_app

    ensure_ray(args.address)
    existing = running_serve_address()
    if existing is not None and existing != (config.host, config.port):
        raise FarInputError(f"Ray Serve already runs on this cluster at {existing[0]}:{existing[1]} and its address "
                            f"cannot change: serve there (--host {existing[0]} --port {existing[1]}, with a token "
                            "if that is not loopback) or stop it first (`serve shutdown`)", file=args.config,
                            field="host")
    serve.start(http_options={"host": config.host, "port": config.port})

    try:  # Ctrl-C at any point from here, starting up included, stops the app cleanly
        serve.run(build_app(config, token if config.token_required() else None,
                            Path(args.config).resolve().parent), name="far", route_prefix="/")
        auth = "bearer token required" if config.token_required() else "no token (loopback)"
        print(f"FAR serve: http://{config.host}:{config.port}/v1 ({auth}); OpenAPI at /docs; verifiers: "
              f"{', '.join(config.verifier.members)} ({config.verifier.aggregation}). Ctrl-C stops.", flush=True)
        if args.once:  # started and answered: used by tests and scripts that manage the lifetime themselves
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


def add_commands(commands: Any) -> None:
    serve_cmd = commands.add_parser("serve", help="serve the verifier ensemble and policy scoring over REST "
                                                  "(Ray Serve)")
    serve_cmd.add_argument("config", help="serve configuration (YAML), e.g. configs/serve.yaml")
    serve_cmd.add_argument("--host", help="override the config's bind address")
    serve_cmd.add_argument("--port", type=int, help="override the config's port")
    serve_cmd.add_argument("--address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local Ray)")
    serve_cmd.add_argument("--once", action="store_true", help="start, print the URL and return (the app keeps "
                                                                "running on the Ray cluster)")
    serve_cmd.set_defaults(handler=cmd_serve)


def main(argv: Sequence[str] | None = None) -> int:
    from evolve.cli import add_commands as add_evolve
    from search.cli import main as run

    return run(argv, registrars=(add_evolve, add_commands))


if __name__ == "__main__":
    sys.exit(main())
