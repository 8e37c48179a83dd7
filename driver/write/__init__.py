"""The write path: COPY … TO, UNLOAD, CREATE TABLE AS, INSERT INTO, DROP TABLE (see docs/DESIGN.md, "Writes").

A write is a query whose plan's last stage writes instead of returning rows: every rank of it writes its own
part files to a staging folder (``squall.operators.write``), and the driver commits once every rank
succeeded. This package holds the driver's half:

- :mod:`.statements` — the write statements parsed (what they say, not yet checked);
- :mod:`.locations` — where writes may go (``writable``), and the staging folder of each location;
- :mod:`.options` — COPY's options checked and rendered for the writers;
- :mod:`.planning` — a query's plan made into a write plan;
- :mod:`.jobs` — a statement as a job (query, write spec, commit, abort), for files at a path;
- :mod:`.folder_tables` — tables that are folders under a writable location;
- :mod:`.iceberg` — Iceberg tables of a named catalog: one pyiceberg commit per statement
  (:mod:`.iceberg_partitions`: partition transforms as DuckDB SQL, Iceberg's bucket hash included;
  :mod:`.iceberg_schema`: DuckDB ↔ Iceberg types);
- :mod:`.base` — the job interface;
- :mod:`.commit` — making plain files visible together, and cleaning up.

May import: every driver stage below ``compile`` (it runs beside the pipeline, on its plans).
"""
