"""Traces: the tokdrift trace format, importers, synthesis and a recording proxy (no torch)."""
