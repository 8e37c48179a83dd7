"""A query's plan made into a write plan: its result stage writes instead of returning rows.

The plan of the query is planned as always; :func:`write_plan` attaches the :class:`~squall.plan.WriteSpec`.
A folder target is written by every rank of the result stage (each its own part files); a one-file target
by one rank: when the result stage runs on several ranks, a last stage gathers its rows to rank 0 first,
and the plan's notes say so.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp, parse_one

from squall.errors import BindError
from squall.plan import ExchangeInput, Output, Plan, Stage, WriteSpec


def write_plan(plan: Plan, spec: WriteSpec) -> Plan:
    """``plan`` writing its result as ``spec`` says (see module doc); BindError for a result that
    cannot be written (two columns of one name, a partition column the result lacks)."""
    names = list(plan.result_names)
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            raise BindError(
                f"the result has two columns named {name!r}: name them apart (… AS other_name) to write it"
            )
        seen.add(name.lower())
    by_lower = {name.lower(): name for name in names}
    for key in spec.partition_by:
        if key.lower() not in by_lower:
            raise BindError(f"PARTITION_BY column {key!r} is not a column of the result ({', '.join(names)})")
    # names are matched as SQL matches them, regardless of case; the files take the result's spelling
    spec = dataclasses.replace(spec, partition_by=tuple(by_lower[k.lower()] for k in spec.partition_by))
    if spec.partition_by and len(spec.partition_by) == len(names):
        raise BindError("PARTITION_BY names every column of the result: the files would hold none")
    notes = list(plan.notes)
    stages = plan.stages if spec.single_file else _fold_gather(plan.stages)
    last = stages[-1]
    if spec.single_file and len(last.ranks) > 1:
        gathered = dataclasses.replace(last, output=Output("gather", last.ranks, (0,)))
        final = Stage(
            last.id + 1,
            (0,),
            (ExchangeInput("write_rows", last.id),),
            'SELECT * FROM "write_rows"',
            Output("result", (0,), (0,)),
            last.columns,
            "gather the rows to one rank: the target is one file",
        )
        stages = (*stages[:-1], gathered, final)
        notes.append(f"write: {spec.target} is one file, so rank 0 writes it (a folder target ending in '/' "
                     f"is written by every rank)")  # fmt: skip
    writers = len(stages[-1].ranks)
    notes.append(f"write: {writers} rank{'s' if writers != 1 else ''} write {spec.format} files, committed to "
                 f"{spec.target} once every rank succeeded")  # fmt: skip
    return dataclasses.replace(plan, stages=stages, write=spec, notes=tuple(notes))


def _fold_gather(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """A result gathered to rank 0 only to be projected there (``SELECT a, b FROM "x1"``) is written where it
    was made instead: the projection runs on every rank of the stage before, whose parts are the result."""
    last = stages[-1]
    if len(stages) < 2 or len(last.inputs) != 1 or not isinstance(last.inputs[0], ExchangeInput):
        return stages
    source = stages[-2]
    if last.inputs[0].stage != source.id or source.output.kind != "gather" or len(source.ranks) < 2:
        return stages
    if last.join_filters or not _projection_of(last.sql, last.inputs[0].name):
        return stages
    name = last.inputs[0].name.replace('"', '""')
    folded = dataclasses.replace(
        source,
        sql=last.sql.replace(f'FROM "{name}"', f'FROM ({source.sql}) AS "{name}"', 1),
        output=Output("result", source.ranks, (0,)),
        columns=last.columns,
        note="each rank writes its own part",
    )
    return (*stages[:-2], folded)


def _projection_of(sql: str, name: str) -> bool:
    """Whether ``sql`` only picks columns of the input ``name`` (no filter, grouping, order or limit)."""
    try:
        ast = parse_one(sql, dialect="duckdb")
    except Exception:
        return False
    if not isinstance(ast, exp.Select) or any(
        v for k, v in ast.args.items() if k not in ("expressions", "from", "from_")
    ):
        return False
    source = ast.args.get("from") or ast.args.get("from_")
    if (
        source is None
        or not isinstance(source.this, exp.Table)
        or source.this.name != name
        or source.this.alias
    ):
        return False
    return (
        all(
            isinstance(e, exp.Column) or (isinstance(e, exp.Alias) and isinstance(e.this, exp.Column))
            for e in ast.expressions
        )
        and f'FROM "{name}"' in sql
    )
