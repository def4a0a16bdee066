"""The plugin speaks httpx2 (httpx's maintained line) and never imports legacy ``httpx``.

Checked in fresh interpreters, since this one holds respx and legacy httpx for other tests:
one that imports every module of the package, and one that runs the example suite replayed
and a case live against the loopback server, with no plugin loaded but this one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.chat_server import ChatServer, completion, json_reply

ROOT = Path(__file__).resolve().parent.parent

LEGACY = """
import json, sys
legacy = sorted(name for name in sys.modules if name.split(".")[0] in ("httpx", "httpcore"))
print(json.dumps({"legacy": legacy, "httpx2": "httpx2" in sys.modules}))
"""

IMPORT_ALL = """
import importlib, pkgutil, pytest_toolbench
for module in pkgutil.walk_packages(pytest_toolbench.__path__, "pytest_toolbench."):
    try:
        importlib.import_module(module.name)
    except ImportError:
        pass  # an optional extra that is not installed (bfcl-eval...)
""" + LEGACY

RUN = """
import sys, pytest
codes = [int(pytest.main(["-p", "pytest_toolbench.plugin", "-p", "no:cacheprovider", "-q",
                          *args.split()])) for args in sys.argv[1:]]
print("EXIT", codes)
""" + LEGACY


def fresh_python(code: str, *args: str, cwd: Path = ROOT) -> dict[str, object]:
    """Run ``code`` in a new interpreter with no plugin autoloaded; what it found."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT),
           "PYTEST_ADDOPTS": ""}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    found: dict[str, object] = json.loads(lines[-1])
    found["output"] = done.stdout
    return found


def test_no_module_of_the_package_imports_legacy_httpx() -> None:
    found = fresh_python(IMPORT_ALL)

    assert found["httpx2"] is True
    assert found["legacy"] == []


def test_a_replayed_suite_and_a_live_case_run_on_httpx2_alone(
        chat_server: ChatServer, tmp_path: Path) -> None:
    chat_server.set_default(json_reply(completion("hello")))
    (tmp_path / "hello.case.yaml").write_text(
        f"name: hello\nmodel: m\nendpoint: {{base_url: {chat_server.base_url}}}\n"
        "stages: [{name: ask, user: hi, expect: {text: hello}}]\n", encoding="utf-8")

    found = fresh_python(RUN, str(ROOT / "cases"),
                         f"{tmp_path / 'hello.case.yaml'} --toolbench-live", cwd=tmp_path)

    assert "EXIT [0, 0]" in str(found["output"]), found["output"]
    assert len(chat_server.requests) == 1  # the live case did go over the network
    assert found["httpx2"] is True
    assert found["legacy"] == []


def test_the_dependencies_name_httpx2_and_only_the_bench_extra_names_legacy_httpx() -> None:
    """What ``pip install -e .`` installs, and each extra: pyproject.toml's requirements."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower() for req in requirements}

    assert "httpx2" in names(project["dependencies"])
    assert "httpx" not in names(project["dependencies"])
    assert [extra for extra, requirements in project["optional-dependencies"].items()
            if "httpx" in names(requirements)] == ["bench"]
