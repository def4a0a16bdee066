"""BFCL multi-turn records as cases: BFCL's own backend classes (from the installed
``bfcl-eval`` package) as a tool source, and the leaderboard's per-turn checks."""
