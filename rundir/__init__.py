"""The run directory (docs/run-directory.md): what soak writes and diagnostics and reports read.

- `rundir.schema`: file names, tables and their columns, event kinds, the schema version;
- `rundir.rows`: each table's row as a type (what the soak writes and resume and status read);
- `rundir.writer`: parts written by rename, events appended a line at a time, the manifest
  replaced by rename (`RunStore`);
- `rundir.parts`: a table's part names, which of them hold each row once, and merging the
  newest ones as the run goes;
- `rundir.reader`: the typed manifest, a table's parts as one frame, the event lines, and the
  typed rows resume and status need;
- `rundir.jsonl`: cutting a line a crash left half-written.

No torch, and no import of the other packages: soak writes through it, diagnostics and reports
read through it.
"""
