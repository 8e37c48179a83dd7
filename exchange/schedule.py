"""Communication schedules for an all-to-all exchange (Neo-Join §III-C).

When every sender writes to every receiver at once, a receiver's link is
shared by several senders while other links idle (cross traffic). Neo-Join
(Rödiger et al., ICDE 2015, ``../shared/papers/neo-join.txt`` §III-C) splits
the exchange into *phases*: in a phase each sender writes to at most one
receiver and each receiver hears from at most one sender. Finding the phases
of minimum total length is open-shop scheduling with preemption (senders are
jobs, receivers processors, a transfer a task that may be split), solved by
Gonzalez and Sahni (JACM 1976): pad the byte matrix ``C`` to a square matrix
whose rows and columns all sum to ``alpha`` (the largest row or column sum of
``C``), then repeatedly take a perfect matching of its non-zero entries,
transfer the matching's smallest entry δ on every matched pair, and subtract.
The phases add up to exactly ``alpha``, which no schedule can beat (the busiest
link needs ``alpha`` alone).

The padding is the classic one (``2W x 2W``)::

    [ C                     diag(alpha - rowsum) ]
    [ diag(alpha - colsum)  C transposed         ]

A matched entry in the top-left block is a real transfer; a sender matched
into the right half idles in that phase.

Matchings are kept between phases: subtracting δ zeroes some matched entries,
and only their rows are re-augmented (Kuhn's augmenting paths), so the whole
schedule costs O(r²) for r non-zero entries, as in the paper.

Everything here is pure and deterministic: every rank computes the same
schedule from the same matrix (the fabric exchange gathers the matrix through
its rendezvous).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Transfer:
    """``length`` bytes of ``sender``'s stream for ``receiver``, starting at ``offset``, in one phase."""

    sender: int
    receiver: int
    offset: int
    length: int


@dataclass(frozen=True)
class Schedule:
    """Phases in order; the transfers of one phase share no sender and no receiver."""

    phases: tuple[tuple[Transfer, ...], ...]
    #: bytes on the busiest link: the shortest any schedule can take (in bytes at one link's speed)
    bound: int

    @property
    def length(self) -> int:
        """Finish time in bytes at one link's speed: each phase lasts its longest transfer."""
        return sum(max((t.length for t in phase), default=0) for phase in self.phases)

    def outgoing(self, sender: int) -> list[tuple[int, Transfer]]:
        """``(phase, transfer)`` of ``sender`` in phase order."""
        return [(p, t) for p, phase in enumerate(self.phases) for t in phase if t.sender == sender]

    def incoming(self, receiver: int) -> list[tuple[int, Transfer]]:
        """``(phase, transfer)`` for ``receiver`` in phase order."""
        return [(p, t) for p, phase in enumerate(self.phases) for t in phase if t.receiver == receiver]


def _check(matrix: Sequence[Sequence[int]]) -> int:
    n = len(matrix)
    for i, row in enumerate(matrix):
        if len(row) != n:
            raise ValueError(f"schedule: row {i} has {len(row)} entries, expected {n} (a square matrix)")
        for j, v in enumerate(row):
            if v < 0 or int(v) != v:
                raise ValueError(f"schedule: entry [{i}][{j}] is {v!r}, expected a byte count ≥ 0")
    return n


def bound(matrix: Sequence[Sequence[int]]) -> int:
    """The largest row or column sum (diagonal excluded: a rank's own data never crosses a link)."""
    n = _check(matrix)
    rows = [sum(matrix[i][j] for j in range(n) if j != i) for i in range(n)]
    cols = [sum(matrix[i][j] for i in range(n) if i != j) for j in range(n)]
    return max(rows + cols, default=0)


def open_shop(matrix: Sequence[Sequence[int]], quantum: int = 1) -> Schedule:
    """The minimum-finish-time schedule for ``matrix[s][r]`` bytes from sender ``s`` to receiver ``r``.

    The diagonal (a rank's data for itself) is ignored. With ``quantum`` 1 the
    result's ``length`` equals its ``bound`` (Gonzalez-Sahni's optimality).
    A larger ``quantum`` schedules whole quanta (each entry rounded up), so no
    transfer but a pair's last is shorter than it: fewer, larger phases, each
    worth its synchronization, for at most ``W * quantum`` more length.
    """
    n = _check(matrix)
    if quantum < 1 or int(quantum) != quantum:
        raise ValueError(f"schedule: quantum is {quantum!r}, expected a byte count ≥ 1")
    exact = [[int(matrix[i][j]) if i != j else 0 for j in range(n)] for i in range(n)]
    c = [[-(-v // quantum) for v in row] for row in exact]
    rows = [sum(r) for r in c]
    cols = [sum(c[i][j] for i in range(n)) for j in range(n)]
    alpha = max(rows + cols, default=0)
    if alpha == 0:
        return Schedule((), 0)
    size = 2 * n
    m = [[0] * size for _ in range(size)]
    for i in range(n):
        for j in range(n):
            m[i][j] = c[i][j]
            m[n + j][n + i] = c[i][j]
        m[i][n + i] = alpha - rows[i]
        m[n + i][i] = alpha - cols[i]
    adj = [{j for j in range(size) if m[i][j] > 0} for i in range(size)]
    match_row = [-1] * size  # row -> column
    match_col = [-1] * size  # column -> row

    def augment(root: int) -> None:
        # iterative Kuhn: DFS over alternating paths from the free row `root`
        seen = [False] * size
        stack = [(root, iter(sorted(adj[root], key=lambda j: -m[root][j])))]
        path: list[tuple[int, int]] = []
        while stack:
            row, cols_left = stack[-1]
            for col in cols_left:
                if seen[col]:
                    continue
                seen[col] = True
                path.append((row, col))
                owner = match_col[col]
                if owner == -1:
                    for r, cc in path:
                        match_row[r], match_col[cc] = cc, r
                    return
                stack.append((owner, iter(sorted(adj[owner], key=lambda j: -m[owner][j]))))
                break
            else:
                stack.pop()
                if path:
                    path.pop()
        raise AssertionError("schedule: no perfect matching (the padded matrix is not regular)")

    for i in range(size):
        augment(i)
    progress = [[0] * n for _ in range(n)]
    phases: list[tuple[Transfer, ...]] = []
    left = alpha
    while left > 0:
        delta = min(m[i][match_row[i]] for i in range(size))
        phase = []
        for i in range(n):
            j = match_row[i]
            if j < n:
                offset = progress[i][j] * quantum
                length = min(delta * quantum, exact[i][j] - offset)
                if length > 0:
                    phase.append(Transfer(i, j, offset, length))
                progress[i][j] += delta
        if phase:
            phases.append(tuple(phase))
        left -= delta
        freed = []
        for i in range(size):
            j = match_row[i]
            m[i][j] -= delta
            if m[i][j] == 0:
                adj[i].discard(j)
                match_row[i] = match_col[j] = -1
                freed.append(i)
        if left > 0:
            for i in freed:
                augment(i)
    return Schedule(_merge(phases), bound(exact))


def _merge(phases: list[tuple[Transfer, ...]]) -> tuple[tuple[Transfer, ...], ...]:
    """Join consecutive phases with the same sender→receiver pairs (their chunks are contiguous)."""
    out: list[tuple[Transfer, ...]] = []
    for phase in phases:
        prev = out[-1] if out else None
        if prev is not None and [(t.sender, t.receiver) for t in prev] == [
            (t.sender, t.receiver) for t in phase
        ]:
            out[-1] = tuple(
                Transfer(a.sender, a.receiver, a.offset, a.length + b.length)
                for a, b in zip(prev, phase, strict=True)
            )
        else:
            out.append(phase)
    return tuple(out)


def round_robin_length(matrix: Sequence[Sequence[int]]) -> int:
    """Finish time of the synchronized round-robin schedule (phase k: sender s writes to s+k mod W).

    Neo-Join's baseline: each phase lasts as long as its largest transfer, so a
    skewed matrix wastes the links of every pair that finishes early.
    """
    n = _check(matrix)
    return sum(max(int(matrix[s][(s + k) % n]) for s in range(n)) for k in range(1, n))
