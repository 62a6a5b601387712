"""streamctl's benchmark suite (run it with scripts/bench; not part of the installed package)."""
