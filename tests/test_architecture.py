"""The package's shape: packages by pipeline stage whose dependencies point down only
(import-linter's contracts in pyproject.toml), small modules, and each domain rule written once."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tuner"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_LINES = 500
# Each rule has one definition; everything else calls it.
RULES = {
    "config_key": "tuner/store/records.py",  # the store's claim needs it below the search
    "best_level": "tuner/verdict/rules.py",
    "objective": "tuner/verdict/rules.py",
    "met_sla": "tuner/verdict/rules.py",
    "is_confirmed": "tuner/verdict/rules.py",
    "winner": "tuner/verdict/rules.py",
    "launched": "tuner/verdict/rules.py",
    "counts_toward_budget": "tuner/store/records.py",  # the store's atomic claim needs it below
    "sqlite_file": "tuner/store/bootstrap.py",
    "confidence_text": "tuner/measure/metrics.py",
}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def copy_project(root: Path) -> None:
    """The package, the database models and the contracts, copied where a test may plant an
    import."""
    for part in ("tuner", "db"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root)


def test_the_layer_contracts_hold():
    proc = lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


# Each contract, broken by one planted import: (the module planted, the import, the contract
# import-linter reports broken, the import it names).
PLANTED = {
    "a lower layer importing a higher one": (
        "tuner/spec/errors.py", "import tuner.cli  # a spec reaching the CLI",
        "Packages by pipeline stage: dependencies point down only",
        "tuner.spec.errors -> tuner.cli"),
    "optuna imported outside the bridge": (
        "tuner/search/loop.py", "import optuna.samplers  # around the bridge",
        "Optuna is reached through one bridge", "tuner.search.loop -> optuna"),
    "a report reaching into the study loop": (
        "tuner/report/tables.py", "import tuner.search.loop  # past the verdict",
        "Reports read verdicts: of the search, only its Optuna bridge",
        "tuner.report.tables -> tuner.search.loop"),
    "the product importing a test double": (
        "tuner/serve/launcher.py", "import tuner.testing.fake_engine  # a fake",
        "The test doubles stay out of the product: no package imports tuner.testing",
        "tuner.serve.launcher -> tuner.testing.fake_engine"),
}


@pytest.mark.parametrize("case", PLANTED)
def test_a_planted_import_breaks_its_contract(tmp_path: Path, case: str):
    module, line, contract, edge = PLANTED[case]
    copy_project(tmp_path)
    planted = tmp_path / module
    planted.write_text(planted.read_text() + f"\n{line}\n")

    proc = lint_imports(tmp_path)

    assert proc.returncode != 0
    assert f"{contract} BROKEN" in proc.stdout
    assert edge in proc.stdout


def test_no_private_name_of_optuna_is_used():
    private = [f"{p.relative_to(REPO)}:{n}" for p in modules()
               for n, line in enumerate(p.read_text().splitlines(), 1)
               if "optuna" in line and any(f".{x}" in line for x in ("_storage", "_trial_id",
                                                                       "_rdb", "_heartbeat",
                                                                       "_callbacks"))]
    assert private == []


def test_the_contract_copy_is_checked_as_it_is_when_nothing_is_planted(tmp_path: Path):
    # The planted test above proves something only if the copy passes without the plant.
    copy_project(tmp_path)
    assert lint_imports(tmp_path).returncode == 0


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_over_500_lines_in_the_package_the_benches_or_the_dashboard():
    scripts = [p for folder in ("bench", "dashboard") for p in (REPO / folder).rglob("*.py")
               if "__pycache__" not in p.parts]
    long = {str(p.relative_to(REPO)): n for p in modules() + scripts
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_package_says_what_it_owns_and_what_it_may_import():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc, f"{init.relative_to(REPO)} needs a docstring naming its imports"


def test_each_domain_rule_is_defined_once_where_it_belongs():
    defined: dict[str, list[str]] = {}
    for path in modules():
        for node in ast.parse(path.read_text()).body:  # module-level functions
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in RULES:
                defined.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    assert defined == {name: [where] for name, where in RULES.items()}


def test_no_copy_of_the_configuration_key_remains():
    # The copies that drifted were `repr(sorted(params.items()))` and ad-hoc JSON dumps.
    for path in modules():
        assert "repr(sorted(" not in path.read_text(), path


def import_graph() -> dict[str, set[str]]:
    """tuner's modules and the tuner modules each imports, at module level or inside a function
    (a lazy import hides a circle, it does not remove one); type-checking imports aside.
    `from pkg import mod` is an import of `mod`, not of the package."""
    names = {}
    for p in modules():
        name = ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        names[name] = p

    def known(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
                node.body = []
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                found.update(s for s in subs if s in names)
                if not all(s in names for s in subs):
                    found.add(node.module)
        graph[name] = {m for m in map(known, (f for f in found if f.startswith("tuner")))
                       if m and m != name}
    return graph


def test_no_import_circle_in_the_package_lazy_imports_included():
    graph = import_graph()
    circles = []

    def walk(node: str, path: list[str], done: set[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt in path:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in done:
                walk(nxt, path + [nxt], done)
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        if start not in done:
            walk(start, [start], done)
    assert circles == []

