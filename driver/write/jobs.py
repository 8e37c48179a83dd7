"""What a write statement becomes: a :class:`WriteJob` the connection runs.

A job says which query to plan (:attr:`WriteJob.query`), how its rows are written
(:attr:`WriteJob.spec`, attached to the plan by :func:`~squall.driver.write.planning.write_plan`), and what
to do once every rank succeeded (:meth:`WriteJob.commit`) or when one failed (:meth:`WriteJob.abort`).
A job without a query (DROP TABLE) does all its work in ``commit``. Everything a job refuses, it refuses
in :func:`prepare` — before any worker starts and before anything is written.

Targets: a COPY's path (:class:`FilesJob`), a folder table under a writable location
(:mod:`~squall.driver.write.folder_tables`), an Iceberg table of a named catalog
(:mod:`~squall.driver.write.iceberg`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from squall.driver.write.base import Describe, FilesJob, WriteJob
from squall.driver.write.commit import check_target
from squall.driver.write.folder_tables import folder_job
from squall.driver.write.locations import Writable
from squall.driver.write.options import write_options
from squall.driver.write.statements import WriteStatement
from squall.errors import NotSupportedError
from squall.operators.sinks import sink_for
from squall.plan import WriteSpec

if TYPE_CHECKING:
    from squall.driver.catalog.tables import Catalog


def prepare(
    statement: WriteStatement,
    catalog: Catalog,
    writable: Writable,
    storage_options: Mapping[str, Any] | None,
    describe: Describe,
) -> WriteJob:
    """The job of ``statement``; UserError (nothing written) when it may not or cannot run."""
    if statement.kind == "copy":
        return files_job(statement, writable, storage_options)
    parts = statement.table_parts
    if len(parts) == 3 or (
        catalog.catalogs is not None and len(parts) > 1 and parts[0] in _catalog_names(catalog)
    ):
        from squall.driver.write.iceberg import iceberg_job  # pyiceberg: only for catalog tables

        return iceberg_job(statement, catalog, describe, storage_options)
    if len(parts) != 1:
        raise NotSupportedError(
            f"table name {statement.target}: name a table of this connection (t) or of a catalog (catalog.namespace.t)"
        )
    return folder_job(statement, catalog, writable, storage_options, describe)


def _catalog_names(catalog: Catalog) -> set[str]:
    names = getattr(catalog.catalogs, "names", None)
    return {n.lower() for n in names()} if callable(names) else set()


def files_job(
    statement: WriteStatement, writable: Writable, storage_options: Mapping[str, Any] | None
) -> FilesJob:
    """A COPY's job: target resolved inside the writable locations, options checked, target checked."""
    target = writable.resolve(statement.target)
    opts = write_options(statement.options, target)
    if not opts.single_file and not target.endswith("/"):
        target += "/"
    sink = sink_for(target, storage_options)
    check_target(sink, target, opts.mode, opts.single_file)
    spec = WriteSpec(
        target=target,
        staging=writable.staging(target),
        format=opts.format,
        options=opts.passed,
        partition_by=opts.partition_by,
        single_file=opts.single_file,
        extension=opts.extension,
    )
    return FilesJob(statement.query, spec, sink, opts.mode)
