"""PEP 249 module: globals, parameter binding (sqlglot tokenizer), types, cursor behaviour, error mapping."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

import squall
from squall import dbapi


def test_module_globals_and_exception_hierarchy():
    assert (dbapi.apilevel, dbapi.threadsafety, dbapi.paramstyle) == ("2.0", 1, "qmark")
    assert issubclass(dbapi.Warning, Exception) and issubclass(dbapi.Error, Exception)
    assert issubclass(dbapi.InterfaceError, dbapi.Error) and issubclass(dbapi.DatabaseError, dbapi.Error)
    for cls in (dbapi.DataError, dbapi.OperationalError, dbapi.IntegrityError, dbapi.InternalError,
                dbapi.ProgrammingError, dbapi.NotSupportedError):  # fmt: skip
        assert issubclass(cls, dbapi.DatabaseError)
    assert dbapi.Connection.ProgrammingError is dbapi.ProgrammingError
    assert dbapi.Date(2020, 1, 2) == dt.date(2020, 1, 2) and dbapi.Binary(b"x") == b"x"
    assert isinstance(dbapi.TimestampFromTicks(0), dt.datetime) and isinstance(
        dbapi.DateFromTicks(0), dt.date
    )
    assert isinstance(dbapi.TimeFromTicks(0), dt.time)


@pytest.mark.parametrize(
    ("value", "sql"),
    [
        (None, "NULL"),
        (True, "TRUE"),
        (False, "FALSE"),
        (42, "42"),
        (-7, "(-7)"),
        (1.5, "1.5e0"),
        (-2.5, "(-2.5e0)"),
        (1e300, "1e+300"),
        (decimal.Decimal("12.50"), "12.50"),
        (decimal.Decimal("-0.001"), "(-0.001)"),
        ("it's", "'it''s'"),
        ("a\\b", "'a\\b'"),
        (b"\x00\xff", "'\\x00\\xFF'::BLOB"),
        (bytearray(b"A"), "'\\x41'::BLOB"),
        (dt.date(2024, 2, 29), "DATE '2024-02-29'"),
        (dt.datetime(2024, 2, 29, 1, 2, 3), "TIMESTAMP '2024-02-29 01:02:03'"),
        (dt.datetime(2024, 2, 29, tzinfo=dt.UTC), "TIMESTAMPTZ '2024-02-29 00:00:00+00:00'"),
        (dt.time(4, 5, 6), "TIME '04:05:06'"),
    ],
)
def test_literals(value, sql):
    assert dbapi.literal(value) == sql


@pytest.mark.parametrize("value", [object(), [1], {"a": 1}, {1}, decimal.Decimal("NaN"), "nul\x00", 1j])
def test_unsupported_values_are_rejected(value):
    with pytest.raises(dbapi.ProgrammingError):
        dbapi.literal(value)


def test_placeholders_outside_strings_comments_and_identifiers():
    sql = (
        "SELECT '?' AS \"a?\", ? -- ? here\n, /* ? */ ?::INTEGER, x - ? FROM t WHERE s = 'it''s ?' AND y = ?"
    )
    bound = dbapi.bind(sql, ["v", 1, -3, None])
    assert bound == (
        "SELECT '?' AS \"a?\", 'v' -- ? here\n, /* ? */ 1::INTEGER, x - (-3) FROM t WHERE s = 'it''s ?' AND y = NULL"
    )
    assert dbapi.bind("SELECT 1", None) == dbapi.bind("SELECT 1", ()) == "SELECT 1"
    with pytest.raises(dbapi.ProgrammingError, match="1 parameter"):
        dbapi.bind("SELECT ?", [])
    with pytest.raises(dbapi.ProgrammingError, match="0 parameter"):
        dbapi.bind("SELECT '?'", [1])
    with pytest.raises(dbapi.ProgrammingError, match="sequence"):
        dbapi.bind("SELECT ?", {"a": 1})
    with pytest.raises(dbapi.ProgrammingError, match="sequence"):
        dbapi.bind("SELECT ?", "a")
    with pytest.raises(dbapi.ProgrammingError, match="syntax error"):
        dbapi.bind("SELECT 'unterminated", [])


def test_type_objects_compare_with_type_codes():
    assert dbapi.NUMBER == "int64" and dbapi.NUMBER == "decimal128(15, 2)" and dbapi.NUMBER == "double"
    assert dbapi.STRING == "string" and dbapi.STRING == "string_view" and dbapi.STRING != "int64"
    assert dbapi.DATETIME == "date32[day]" and dbapi.DATETIME == "timestamp[us]"
    assert dbapi.BINARY == "binary" and dbapi.NUMBER != "no such type"


@pytest.fixture(scope="module")
def con(sf001):
    connection = dbapi.connect(str(sf001), workers=1)
    yield connection
    connection.close()


def test_embedded_round_trip_of_every_parameter_type(con):
    values = [None, True, 7, -1.25, decimal.Decimal("3.14"), "ü'?", b"\x01\x02", dt.date(2020, 1, 2),
              dt.datetime(2020, 1, 2, 3, 4, 5, 6), dt.time(7, 8, 9), float("inf")]  # fmt: skip
    cursor = con.cursor()
    cursor.execute("SELECT " + ", ".join(f"? AS c{i}" for i in range(len(values))), values)
    assert cursor.fetchall() == [tuple(values)]
    codes = [d[1] for d in cursor.description]
    assert codes[4] == dbapi.NUMBER and codes[5] == dbapi.STRING and codes[6] == dbapi.BINARY
    assert codes[7] == dbapi.DATETIME and codes[3] == "double"
    assert cursor.description[4][4:6] == (3, 2)


def test_cursor_fetching_and_lifecycle(con):
    cursor = con.cursor()
    assert cursor.description is None and cursor.rowcount == -1 and cursor.arraysize == 1
    with pytest.raises(dbapi.ProgrammingError):
        cursor.fetchone()
    cursor.execute("SELECT r_regionkey, r_name FROM region ORDER BY 1")
    assert cursor.rowcount == 5 and [d[0] for d in cursor.description] == ["r_regionkey", "r_name"]
    assert cursor.description[0][1] == dbapi.NUMBER and cursor.description[0][6] in (True, False)
    assert cursor.fetchone() == (0, "AFRICA")
    assert cursor.fetchmany() == [(1, "AMERICA")]
    cursor.arraysize = 2
    assert cursor.fetchmany() == [(2, "ASIA"), (3, "EUROPE")]
    assert cursor.fetchall() == [(4, "MIDDLE EAST")]
    assert cursor.fetchone() is None and cursor.fetchall() == []
    cursor.executemany("SELECT count(*) FROM nation WHERE n_regionkey = ?", [(0,), (1,)])
    assert cursor.fetchall() == [(5,)]
    assert list(cursor.execute("SELECT 1 AS a UNION ALL SELECT 2")) in ([(1,), (2,)], [(2,), (1,)])
    assert cursor.execute("SELECT 1 AS a").fetch_arrow_table().to_pydict() == {"a": [1]}
    con.commit()
    with pytest.raises(dbapi.NotSupportedError):
        con.rollback()
    cursor.close()
    with pytest.raises(dbapi.InterfaceError):
        cursor.execute("SELECT 1")


def test_errors_map_to_pep249_classes(con, sf001):
    cursor = con.cursor()
    cases = [
        ("SELEC 1", dbapi.ProgrammingError, squall.SqlSyntaxError),
        ("SELECT * FROM nope", dbapi.ProgrammingError, squall.BindError),
        ("DROP TABLE nation", dbapi.ProgrammingError, squall.UnsafeQueryError),
        ("SELECT CAST('x' AS INTEGER) FROM nation", dbapi.DataError, squall.QueryRuntimeError),
    ]
    for sql, cls, cause in cases:
        with pytest.raises(cls) as info:
            cursor.execute(sql)
        assert isinstance(info.value.__cause__, cause), (sql, info.value.__cause__)
    with pytest.raises(dbapi.OperationalError):
        dbapi.connect(str(sf001 / "missing"))
    with pytest.raises(dbapi.InterfaceError):
        dbapi.connect(str(sf001), endpoint="http://127.0.0.1:1")
    other = dbapi.connect(str(sf001), workers=1)
    other.close()
    with pytest.raises(dbapi.InterfaceError):
        other.cursor()
