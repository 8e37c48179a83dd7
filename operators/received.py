"""A receiver's exchange input within its memory budget: held in memory up to a limit, the rest on disk.

The worker receives an exchange in pieces (:meth:`~squall.exchange.base.Exchange.receive_pieces`). While their
bytes stay within :func:`receive_limit` the pieces are held as one Arrow table, as a plain ``receive`` would
return it. Past the limit every piece, the held ones first, is written to an Arrow IPC file (LZ4) in the worker's
spill folder (the one DuckDB spills to, counted in ``spilled_bytes``), and the stage reads the input from
there: the worker copies it, a batch at a time (:func:`batch_stream`), into a temporary DuckDB table, which DuckDB
keeps within its memory limit and whose exact statistics its optimizer uses (a scanned Arrow dataset is estimated
at ~1 row, and a join would build its hash table on it). The file is
removed once the input's last stage ran (:meth:`Received.close`). An exchange that keeps the input in files
already (local: its query folder) is read from there instead, with no copy in the spill folder
(:meth:`~squall.exchange.base.Exchange.receive_in_place`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from squall.exchange.base import Exchange, ExchangeSpec, concat
from squall.operators.memory import RUNTIME_BYTES
from squall.operators.partition import BATCH_ROWS

if TYPE_CHECKING:  # pyarrow.dataset costs ~0.2 s to import: only when an input goes to disk
    import pyarrow.dataset as ds

#: of a worker's budget past the runtime's, the most one received input is held in memory
RECEIVED_SHARE = 0.25


def receive_limit(budget: int) -> int:
    """The bytes of one received input a worker of ``budget`` bytes holds in memory (more go to disk)."""
    return max(1 << 20, int((budget - RUNTIME_BYTES) * RECEIVED_SHARE))


@dataclass
class Received:
    """One received exchange input: an Arrow table, or a dataset over the file it was written to (``path``)."""

    data: pa.Table | ds.Dataset
    rows: int
    nbytes: int
    path: str | None = None
    #: read from disk, not held: a file of its own (``path``) or the exchange's files (``receive_in_place``)
    on_disk: bool = False

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows a record batch at a time (from its own file: one batch read at a time)."""
        if self.path is None:
            yield from self.data.to_batches()
            return
        with pa.OSFile(self.path) as source:
            yield from _file_batches(source, self.data.schema.names)

    def without(self, column: str) -> Received:
        """The same rows without ``column`` (in memory: a table without it; on disk: the same file, read
        without it), owning the file from now on; ``self`` unchanged when it has no such column."""
        schema = self.data.schema
        if column not in schema.names:
            return self
        if isinstance(self.data, pa.Table):
            return Received(self.data.drop_columns([column]), self.rows, self.nbytes)
        import pyarrow.dataset as ds

        assert self.path is not None
        narrowed = ds.dataset(self.path, format="ipc", schema=schema.remove(schema.get_field_index(column)))
        path, self.path = self.path, None
        return Received(narrowed, self.rows, self.nbytes, path, on_disk=True)

    def close(self) -> None:
        """Remove the input's file, if it has one."""
        if self.path is not None:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            self.path = None


def _file_batches(source: pa.NativeFile, names: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """An Arrow IPC file's record batches, one read at a time (only the columns ``names``, when given)."""
    reader = pa.ipc.open_file(source)
    whole = names is None or reader.schema.names == names
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        yield batch if whole else batch.select(names)


def dataset_batches(data: ds.Dataset) -> Iterator[pa.RecordBatch]:
    """A dataset's rows a record batch at a time, read in order by the calling thread: no read-ahead, so one
    batch is in memory at a time (pyarrow's scanner, as DuckDB drives it, reads ahead up to 16 batches in each of 4
    files: ~150 MiB more at SF10 that no budget counts)."""
    import pyarrow.dataset as ds

    if isinstance(data, ds.UnionDataset):
        for child in data.children:
            yield from dataset_batches(child)
    elif isinstance(data, ds.FileSystemDataset) and isinstance(data.format, ds.IpcFileFormat):
        for path in data.files:
            with data.filesystem.open_input_file(path) as source:
                yield from _file_batches(source, data.schema.names)
    else:
        yield from data.to_batches(batch_readahead=0, fragment_readahead=0, use_threads=False)


def batch_stream(data: ds.Dataset, names: Sequence[str] = ()) -> pa.RecordBatchReader:
    """:func:`dataset_batches` as a reader DuckDB can scan once; with ``names``, its columns named so."""
    if not names:
        return pa.RecordBatchReader.from_batches(data.schema, dataset_batches(data))
    schema = pa.schema([field.with_name(name) for field, name in zip(data.schema, names, strict=True)])
    batches = (pa.RecordBatch.from_arrays(b.columns, schema=schema) for b in dataset_batches(data))
    return pa.RecordBatchReader.from_batches(schema, batches)


def counting(
    rows: pa.Table | pa.RecordBatchReader, count: Callable[[pa.RecordBatch], None]
) -> Iterator[pa.RecordBatch]:
    """``rows`` a record batch at a time, each handed to ``count`` as it passes (a held output's statistics,
    taken as DuckDB's batches come)."""
    for batch in rows.to_batches() if isinstance(rows, pa.Table) else rows:
        count(batch)
        yield batch


def receive_within(exchange: Exchange, spec: ExchangeSpec, limit: int, folder: str) -> Received:
    """Receive ``spec`` holding at most ``limit`` bytes of it in memory; the rest goes to a file in ``folder``."""
    return gather(exchange.receive_pieces(spec), limit, folder, f"received-x{spec.exchange_id}")


def gather(
    pieces: Iterable[pa.Table | pa.RecordBatch],
    limit: int,
    folder: str | None,
    prefix: str,
    schema: pa.Schema | None = None,
) -> Received:
    """``pieces`` (of one schema) held in memory while they stay within ``limit`` bytes, else all of them in an LZ4
    Arrow file ``<folder>/<prefix>-….arrow`` read back as a dataset (``folder`` None: all held); ``schema`` when
    there may be no piece."""
    held: list[pa.Table] = []
    rows = size = 0
    path: Path | None = None
    sink: pa.NativeFile | None = None
    writer: pa.ipc.RecordBatchFileWriter | None = None
    try:
        for piece in pieces:
            table = pa.Table.from_batches([piece]) if isinstance(piece, pa.RecordBatch) else piece
            schema = table.schema
            rows, size = rows + table.num_rows, size + table.nbytes
            if writer is None:
                held.append(table)
                if folder is None or size <= limit:
                    continue
                path = Path(folder) / f"{prefix}-{uuid.uuid4().hex[:12]}.arrow"
                sink = pa.OSFile(str(path), "wb")
                writer = pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression="lz4"))
                tables, held = held, []
            else:
                tables = [table]
            for one in tables:
                writer.write_table(one, max_chunksize=BATCH_ROWS)
        if writer is not None:
            writer.close()
    except BaseException:
        if path is not None:
            path.unlink(missing_ok=True)
        raise
    finally:
        if sink is not None:
            sink.close()
    if path is None:
        return Received(concat(held, schema), rows, size)
    import pyarrow.dataset as ds

    return Received(ds.dataset(str(path), format="ipc"), rows, size, str(path), on_disk=True)
