"""`python -m soak`: the `soak` command (the built-in target starts its engine this way)."""

from soak.cli import main

main()
