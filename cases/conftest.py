"""The example suite: ``pytest cases/`` replays the committed cassettes.

This directory is put on ``sys.path`` by pytest (rootdir-relative conftest), so tools named
``python: example_tools:get_weather`` import from ``cases/example_tools.py``.
"""
