"""`tuner dashboard`: serves the Streamlit app of dashboard/ (at the repository root; inside an
installed wheel, tuner/_data/dashboard) on the study database, read-only."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tuner.cli.app import StorageOpt, _open, app, out
from tuner.spec.errors import BadInput


@app.command()
def dashboard(
    storage: StorageOpt = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to serve on.")]
    = 8501,
    address: Annotated[str, typer.Option("--address", help="Address to listen on; 0.0.0.0 "
                       "to reach it from other machines.")] = "127.0.0.1",
) -> None:
    """Serve the dashboard (Streamlit) on the study database, read-only; Ctrl-C stops it."""
    import os
    import signal
    import socket
    import subprocess

    from tuner.report.dashboard_data import STORAGE_ENV
    from tuner.spec.study_spec import DEFAULT_STORAGE
    from tuner.store import mask_url

    url = storage or DEFAULT_STORAGE
    _open(url).close()  # a missing or foreign database: the store's one-line error, exit 2
    from tuner import shipped

    app_path = shipped("dashboard") / "app.py"
    if not app_path.is_file():
        raise BadInput(f"the dashboard's app is missing ({app_path}): reinstall tuner (a wheel "
                       "ships it; `make install` in a checkout)")
    try:
        import streamlit  # noqa: F401
    except ImportError as e:
        raise BadInput("the dashboard needs Streamlit: pip install 'tuner[dashboard]' "
                       "(`make install` does)") from e
    with socket.socket() as s:
        # As the server will: a port left in TIME_WAIT by a stopped dashboard is reusable.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as e:
            raise BadInput(f"--port {port} on {address} cannot be used ({e.strerror}): stop "
                           "what holds it or pass another --port") from e
    # serve.py runs Streamlit after importing and reading what the first page needs.
    command = [sys.executable, str(app_path.with_name("serve.py")), str(app_path),
               "--server.headless", "true", "--server.address", address,
               "--server.port", str(port), "--server.fileWatcherType", "none",
               "--server.runOnSave", "false", "--browser.gatherUsageStats", "false",
               "--client.toolbarMode", "minimal", "--theme.base", "light"]
    # The URL travels in the environment: no shell quoting, and no password in `ps` output.
    env = {**os.environ, STORAGE_ENV: url}
    out.print(f"tuner dashboard: http://{address}:{port}  (reading {mask_url(url)}; Ctrl-C "
              "stops it)")
    proc = subprocess.Popen(command, env=env)
    # A SIGTERM to tuner (a supervisor, `kill`) stops the server too instead of orphaning it.
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the terminal's Ctrl-C reached Streamlit too: let it finish
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
        raise typer.Exit(0) from None
    if code not in (0, -signal.SIGTERM):
        raise BadInput(f"the dashboard server stopped with status {code}: see its output above")
