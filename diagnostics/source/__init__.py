"""Stage 1, reading the source: a run directory, an engine log or saved scrapes as typed frames
(`load_source(path) -> Source`), and which engine each life was."""
