"""tuner as a user installs it: a wheel built from this checkout, installed (not editable) into a
fresh virtual environment, runs a dry run of a spec naming a shipped search space and serves the
dashboard.

Offline and honest: the wheel is built without build isolation (setuptools from this
environment) and installed with `--no-deps --no-index`; the new environment finds tuner's
dependencies through one .pth line naming this environment's site-packages, so the only tuner it
can import is the wheel's (checked by `tuner.__file__`). `.pth` files in that directory (this
checkout's editable install) are not processed from there, and PYTHONPATH is cleared.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import wait_for

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "tuner", "db",
           "search_spaces", "dashboard")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ folder of a fresh venv holding only the wheel's tuner."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    for name in SOURCES:  # a copy, so the build leaves nothing in the checkout
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_data"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(root / "dist"), str(src)], check=True, timeout=300,
                   env=_clean_env())
    (wheel,) = (root / "dist").glob("tuner-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    purelib = subprocess.run([venv / "bin" / "python", "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    shared = Path(sysconfig.get_paths()["purelib"]).resolve()
    (Path(purelib) / "shared-dependencies.pth").write_text(f"{shared}\n")
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, timeout=300, env=_clean_env())
    return venv / "bin"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TUNER_STORAGE")}
    return {**env, "PYTHONUNBUFFERED": "1"}


def _run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=_clean_env())


def test_the_wheel_holds_tuner_its_migrations_search_spaces_and_dashboard(installed, tmp_path):
    proc = _run(installed, "python", "-c",
                "import tuner, db; from tuner import shipped; "
                "print(tuner.__file__); print(db.__file__); "
                "print(shipped('search_spaces')); print(shipped('dashboard'))", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tuner_file, db_file, spaces, dashboard = map(Path, proc.stdout.split())
    venv = installed.parent.resolve()
    for path in (tuner_file, db_file, spaces, dashboard):
        assert path.resolve().is_relative_to(venv), path  # the wheel's, not the checkout's
    assert sorted(p.name for p in spaces.glob("*.yaml")) == sorted(
        p.name for p in (REPO / "search_spaces").glob("*.yaml"))
    assert (dashboard / "app.py").is_file() and (dashboard / "views" / "study.py").is_file()


def test_the_installed_tuner_dry_runs_a_spec_naming_a_shipped_search_space(installed, tmp_path):
    spec = yaml.safe_load((REPO / "examples" / "gpt-oss-120b.yaml").read_text())
    assert spec["search_space"] == "gpt-oss-120b"  # a bare name: found in the wheel
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(spec))
    proc = _run(installed, "tuner", "run", "study.yaml", "--dry-run", "--gpu", "H200",
                "--n-trials", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "vllm serve" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]  # a dry run writes nothing


def test_the_installed_tuner_serves_the_dashboard(installed, tmp_path):
    from tests.dashboard.test_dashboard_e2e import free_port

    made = _run(installed, "python", "-c",
                "from tuner.store import Store; Store.open('sqlite:///tuner.db').close()",
                cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    port = free_port()
    log = (tmp_path / "dashboard.log").open("w")
    proc = subprocess.Popen([str(installed / "tuner"), "dashboard", "--port", str(port)],
                            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env=_clean_env())
    try:
        def healthy() -> bool:
            assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as r:
                    return r.read().strip() == b"ok"
            except OSError:
                return False

        wait_for(healthy, 120, "the installed dashboard to answer")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.status == 200 and b"<html" in r.read().lower()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
    assert code == 0, (tmp_path / "dashboard.log").read_text()[-2000:]
