"""`python -m engine.server`: the built-in server's command line (engine.server.cli), as a soak starts it."""

from engine.server.cli import main

main()
