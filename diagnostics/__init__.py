"""Ingest engine logs and run directories, and decide engine age versus context (no torch).

The stages, in the order `analysis.analyze` runs them: `source` (reading the source), `evidence` (building
the evidence), `decision` (the claims and the verdict), `words` (what a reader reads)."""
