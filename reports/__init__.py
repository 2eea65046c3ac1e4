"""The HTML report, the Markdown summary, the bug-report bundle and run comparison (no torch)."""
