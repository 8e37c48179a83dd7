"""Text rendering of a distributed plan (what ``squall explain`` prints)."""

from __future__ import annotations

from squall.driver.report.outputs import describe_runtime, describe_skew
from squall.plan import DataSkipping, ExchangeInput, Plan, ScanInput, Stage


def _ranks(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "none"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == tuple(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ",".join(map(str, ranks))


def _output(stage: Stage, plan: Plan | None = None) -> str:
    out = stage.output
    if out.kind == "result" and plan is not None and plan.write is not None:
        w = plan.write
        parts = " (hive folders by " + ", ".join(w.partition_by or [n for n, _ in w.partition_exprs]) + ")" if (
            w.partition_by or w.partition_exprs) else ""  # fmt: skip
        who = "rank writes" if len(stage.ranks) <= 1 else "each rank writes its part of"
        return f"write: {who} {w.format} {'file' if w.single_file else 'files'}{parts} → {w.target}"
    if out.kind == "result":
        return "result" if len(stage.ranks) <= 1 else "result parts in rank order"
    if out.kind == "range":
        keys = ", ".join(f"{k} {o}" for k, o in zip(out.keys, out.order))
        return f"range({keys}) by sampled splitters → {_ranks(out.receivers)}"
    if out.kind == "hash" and out.split_ranges:
        return f"key ranges({', '.join(out.keys)}) → {_ranks(out.receivers)}" + describe_skew(out)
    if out.kind == "hash":
        return (
            f"hash({', '.join(out.keys)}) → {_ranks(out.receivers)}"
            + describe_skew(out)
            + describe_runtime(out)
        )
    if out.kind == "broadcast":
        return f"broadcast from {_ranks(out.senders)} → {_ranks(out.receivers)}"
    return f"gather from {_ranks(out.senders)} → {_ranks(out.receivers)}"


def _input(inp: ScanInput | ExchangeInput) -> str:
    if isinstance(inp, ExchangeInput):
        named = f" read as [{', '.join(inp.columns)}]" if inp.columns else ""
        return f"{inp.name}: exchange from stage {inp.stage}{named}"
    groups = {(s.path, rg) for per in inp.splits for s in per for rg in s.row_groups}
    mode = "every rank reads all" if inp.replicated else "split by row group"
    if inp.key_column:
        shared = sum(len(per) for per in _groups_per_rank(inp)) - len(groups)
        cuts = ", ".join(str(lo) for lo, _hi in inp.key_bounds if lo is not None)
        mode = (
            f"split by key range of {inp.key_column} (cut at {cuts}; {shared} row groups read by two ranks)"
        )
    if inp.steal:
        mode += ", work stealing"
    cols = ", ".join(c if c == n else f"{c}→{n}" for c, n in inp.columns)
    units = (
        "row groups"
        if inp.scan == "parquet"
        else f"{dict(inp.scan_options).get('format', '')} files ({inp.scan})"
    )
    if inp.scan != "parquet":
        mode = mode.replace("split by row group", "split by file")
    text = f"{inp.name}: scan {inp.table} [{cols}] {len(groups)} {units}, {mode}"
    if inp.filters:
        text += f"; filter {' AND '.join(inp.filters)}"
    return text


def _groups_per_rank(inp: ScanInput) -> list[set[tuple[str, int]]]:
    return [{(s.path, rg) for s in per for rg in s.row_groups} for per in inp.splits]


def source_line(inp: ScanInput) -> str:
    """What the table's source said of the scan (``TableInfo.source_notes``), e.g. ``source: partitions
    1 of 7, files 3 of 21``."""
    return "source: " + ", ".join(f"{k} {v}" for k, v in inp.source_notes)


def skipping_line(sk: DataSkipping) -> str:
    """What the planner skipped of a filtered scan, and what workers will record for the predicate cache."""
    text = (
        f"row groups: {sk.planned} planned, skipped {sk.minmax} by min/max, {sk.page_index} by page index, "
        f"{sk.bloom} by bloom, {sk.cache} by predicate cache"
    )
    if sk.probe:
        text += f"; {len(sk.probe)} probed for the predicate cache"
    return text


def explain_plan(plan: Plan) -> str:
    """Stages, exchanges (kind and keys) and each stage's DuckDB SQL."""
    lines = [f"Distributed plan: {len(plan.stages)} stage(s) on {plan.world_size} worker(s)"]
    lines += [f"note: {n}" for n in plan.notes]
    for stage in plan.stages:
        lines.append("")
        header = f"Stage {stage.id} on {_ranks(stage.ranks)} → {_output(stage, plan)}"
        if stage.note:
            header += f"   -- {stage.note}"
        lines.append(header)
        for inp in stage.inputs:
            lines.append(f"  input {_input(inp)}")
            if isinstance(inp, ScanInput) and inp.source_notes:
                lines.append(f"    {source_line(inp)}")
            sk = inp.skipping if isinstance(inp, ScanInput) else None
            if sk is not None and (
                sk.page_index or sk.bloom or sk.cache
            ):  # min/max alone: the count above; probe: stats
                lines.append(f"    {skipping_line(sk)}")
        for label, _pre, post_sql, name in stage.join_filters:
            lines.append(f"  join filter {name}: {label}")
            lines += ["    " + line for line in post_sql.splitlines()]
        lines.append("  sql:")
        lines += ["    " + line for line in stage.sql.splitlines()]
    lines.append("")
    lines.append(
        "result columns: " + ", ".join(f"{n} {t}" for n, t in zip(plan.result_names, plan.result_types))
    )
    return "\n".join(lines)
