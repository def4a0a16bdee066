"""BFCL's ``bfcl-eval`` package for the tests, installed without its dependencies.

Its full dependency set (vllm, torch, faiss...) is no part of the project: the tests install
the wheel alone (and ``mpmath``, which its math class needs) with ``pip --no-deps`` into a
folder of their own, kept between sessions, and put that folder on ``sys.path``. When the
package index cannot be reached, they skip saying so; any other failure of pip fails them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "2026.3.23"
"""The release whose multi-turn rules the BFCL cases follow, and whose data the tests use."""
REQUIREMENTS = (f"bfcl-eval=={VERSION}", "mpmath")
# What pip says when it cannot reach the index (a connection refused, a name that does not
# resolve, a proxy that is down), as opposed to a package or a version that is not there.
_UNREACHABLE = ("Retrying (Retry(", "connection broken", "Could not fetch URL",
                "NewConnectionError", "Failed to establish a new connection",
                "Temporary failure in name resolution", "Network is unreachable")


class IndexUnreachable(Exception):
    """pip could not reach the package index: the tests that need bfcl-eval skip."""


def install_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"toolbench-tests-bfcl-eval-{VERSION}"


def ensure_installed() -> Path:
    """The folder holding bfcl-eval (installed there on first use), already on
    ``sys.path``; raise ``IndexUnreachable`` when pip cannot reach the index."""
    target = install_dir()
    if not (target / "bfcl_eval").is_dir():
        _install(target)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    return target


def _install(target: Path) -> None:
    """pip into a fresh folder, renamed into place: a session that dies half-way, or two
    that install at once, never leave a half-installed folder behind."""
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet",
             "--disable-pip-version-check", "--retries", "1", "--timeout", "20",
             "--target", str(staging), *REQUIREMENTS],
            capture_output=True, text=True, timeout=600, check=False)
        said = done.stdout + done.stderr
        if done.returncode != 0:
            if any(sign in said for sign in _UNREACHABLE):
                raise IndexUnreachable(f"the package index cannot be reached to install"
                                       f" {' '.join(REQUIREMENTS)}: {said.strip()[-300:]}")
            raise RuntimeError(f"pip could not install {' '.join(REQUIREMENTS)}:\n{said}")
        try:
            os.rename(staging, target)
        except OSError:  # another session installed it meanwhile
            if not (target / "bfcl_eval").is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def data_dir() -> Path:
    """BFCL's data folder inside the installed package."""
    spec = importlib.util.find_spec("bfcl_eval")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent / "data"
