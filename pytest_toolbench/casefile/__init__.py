"""Case files -> validated cases: YAML with lines, the schema, loading."""
