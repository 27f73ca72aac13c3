"""pytest collection of ``tools/``: the doctests of the generators, not the data they read."""

# tools/data/ holds third-party inputs (Megatron-LM's files, vendored unmodified for
# tools/megatron_flags.py): importing them as doctest modules would run Megatron's imports
collect_ignore = ["data"]
