"""The soak driver: replays agent traffic for hours against an engine and records everything."""
