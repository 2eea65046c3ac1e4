"""Ingest engine logs and run directories, and decide engine age versus context (no torch)."""
