"""Quoted identifiers numbered in generated SQL (driver/planner/identifiers.py)."""

from squall.driver.planner.identifiers import number_identifiers


def test_identifiers_are_numbered_in_order_of_first_appearance() -> None:
    text, names = number_identifiers('SELECT "b", "a" + "b" AS "c" FROM "t"')
    assert text == 'SELECT "#0", "#1" + "#0" AS "#2" FROM "#3"'
    assert names == ["b", "a", "c", "t"]


def test_texts_that_differ_only_in_names_are_equal() -> None:
    one = number_identifiers('SELECT SUM("x_1") AS "s_1" FROM "x1" GROUP BY "k_1"')[0]
    two = number_identifiers('SELECT SUM("x_7") AS "s_7" FROM "x1_2" GROUP BY "k_7"')[0]
    other = number_identifiers('SELECT SUM("x_7") AS "s_7" FROM "x1_2" GROUP BY "x_7"')[0]
    assert one == two != other


def test_string_literals_are_left_as_they_are() -> None:
    text, names = number_identifiers("""SELECT "a" FROM t WHERE "a" = 'say "hi"' OR "b" = 'it''s'""")
    assert text == """SELECT "#0" FROM t WHERE "#0" = 'say "hi"' OR "#1" = 'it''s'"""
    assert names == ["a", "b"]


def test_fixed_names_are_written_as_given_and_not_numbered() -> None:
    text, names = number_identifiers('SELECT "a" FROM "x3_1" JOIN "x3" ON "a" = "b"', {"x3_1": '"x3"'}.get)
    assert text == 'SELECT "#0" FROM "x3" JOIN "#1" ON "#0" = "#2"'
    assert names == ["a", "x3", "b"]


def test_a_doubled_quote_stays_doubled_in_the_name() -> None:
    assert number_identifiers('SELECT "a""b"') == ('SELECT "#0"', ['a""b'])
