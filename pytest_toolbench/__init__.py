"""pytest-toolbench: CI regression tests for LLM tool-calling behaviour."""
