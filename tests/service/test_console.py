"""The web console (``squall serve`` at ``/``) in a real headless browser: Debian's chromium driven by
selenium through ``/usr/bin/chromedriver`` (``make browser`` apt-installs both; nothing is downloaded).

On TPC-H SF0.01: load the page, give the token, run Q3 and compare the table with DuckDB, page through a
250-row result, see the history, explain, and cancel a slow query (rank 0 sleeps 5 s) while its progress
shows. Screenshots go to the test's tmp folder, or to ``$SQUALL_CONSOLE_SCREENSHOTS`` when set.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import shutil
from pathlib import Path

import pytest

from squall import tpch

from .conftest import TOKEN

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1000",
]

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(
        "chromium or chromedriver is missing: run `make browser` (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

DASH = "\u2013"  # the en dash of the page info ("Rows 1-100 of 250")
PAGING_SQL = "SELECT o_orderkey, o_orderstatus FROM orders ORDER BY o_orderkey LIMIT 250"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    profile = tmp_path_factory.mktemp("chromium-profile")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=str(profile.parent / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def shot(driver, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("SQUALL_CONSOLE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"console-{name}.png"
    driver.save_screenshot(str(path))
    return path


def until(driver, predicate, timeout: float = 60, what: str = "the page"):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: predicate(d))
    except TimeoutException:
        path = Path(os.environ.get("SQUALL_CONSOLE_SCREENSHOTS") or "/tmp") / "console-timeout.png"
        driver.save_screenshot(str(path))
        status = driver.find_element(By.ID, "status").text
        error = driver.find_element(By.ID, "error").text
        console = [entry.get("message") for entry in driver.get_log("browser")]
        raise AssertionError(
            f"timed out waiting for {what}; status {status!r}, error {error!r}; screenshot {path}; "
            f"browser console {console}"
        ) from None


def status_of(driver) -> str:
    return driver.find_element(By.ID, "status").get_attribute("data-state")


def open_console(driver, server) -> None:
    """Load the page; it asks for the token (the API answers 401), which we give."""
    driver.get(server.url + "/")
    assert driver.title == "Squall console"
    until(driver, lambda d: d.find_element(By.ID, "token-dialog").is_displayed(), 30, "the token dialog")
    driver.find_element(By.ID, "token-input").send_keys(TOKEN)
    driver.find_element(By.ID, "token-save").click()
    until(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tables .table-name")) == 8, 30, "tables")


def run_sql(driver, sql: str, *, wait_for: tuple[str, ...] = ("succeeded",), timeout: float = 90) -> None:
    driver.execute_script("document.getElementById('status').dataset.state = 'idle'")
    editor = driver.find_element(By.ID, "sql")
    editor.clear()
    editor.send_keys(sql)
    editor.send_keys(Keys.CONTROL, Keys.ENTER)
    until(driver, lambda d: status_of(d) != "idle", 20, "the query to start")
    if wait_for:
        until(driver, lambda d: status_of(d) in ("failed", "cancelled", *wait_for), timeout, "the query")
        assert status_of(driver) in wait_for, driver.find_element(By.ID, "error").text


def table_rows(driver) -> tuple[list[str], list[list[str]]]:
    """Column names and cell texts of the result table (without the row-number column)."""
    data = driver.execute_script(
        "const t = document.getElementById('result');"
        "return [[...t.tHead.rows[0].cells].map(c => c.textContent),"
        "        [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent))];"
    )
    header, rows = data
    assert header[0] == "#"
    return header[1:], [row[1:] for row in rows]


def same_cell(text: str, value) -> bool:
    if value is None:
        return text == "NULL"
    if isinstance(value, (float, decimal.Decimal)):
        return float(text) == pytest.approx(float(value), rel=1e-9, abs=1e-6)
    if isinstance(value, dt.date):
        return text == value.isoformat()
    return text == str(value)


def test_console_runs_pages_explains_and_lists_history(server, browser, reference_sf001, tmp_path):
    driver = browser
    open_console(driver, server)
    assert driver.find_element(By.ID, "version").text.startswith("v")
    assert driver.find_element(By.ID, "whoami").text == "Signed in as admin (admin)"  # --token: one admin

    sql = tpch.query(3, sf=0.01)
    run_sql(driver, sql)
    expected = reference_sf001.sql(sql).fetchall()
    expected_columns = [c[0] for c in reference_sf001.sql(sql).description]
    until(driver, lambda d: d.find_element(By.ID, "result-wrap").is_displayed(), 20, "the result table")
    columns, rows = table_rows(driver)
    assert columns == expected_columns
    assert len(rows) == len(expected) == 10
    for got, want in zip(rows, expected):
        assert all(same_cell(text, value) for text, value in zip(got, want)), (got, want)
    assert "10 rows" in driver.find_element(By.ID, "summary").text
    assert not driver.find_element(By.ID, "pager").is_displayed()  # one page
    print("screenshot:", shot(driver, tmp_path, "q3"))

    driver.find_element(By.ID, "tab-stats").click()
    cards = driver.find_element(By.ID, "stat-cards").text
    assert "ELAPSED" in cards.upper() and "COST" in cards.upper()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#stage-stats tbody tr")) >= 2
    print("screenshot:", shot(driver, tmp_path, "stats"))

    # paging: 250 rows, 100 a page
    driver.find_element(By.ID, "tab-result").click()
    run_sql(driver, PAGING_SQL)
    keys = [r[0] for r in reference_sf001.sql(PAGING_SQL).fetchall()]
    info = driver.find_element(By.ID, "page-info")
    until(driver, lambda d: info.text == f"Rows 1{DASH}100 of 250", 20, "the first page")
    assert driver.find_element(By.ID, "prev-page").get_attribute("disabled") is not None
    assert [r[0] for r in table_rows(driver)[1]] == [str(k) for k in keys[:100]]
    driver.find_element(By.ID, "next-page").click()
    until(driver, lambda d: info.text == f"Rows 101{DASH}200 of 250", 20, "the second page")
    assert [r[0] for r in table_rows(driver)[1]] == [str(k) for k in keys[100:200]]
    driver.find_element(By.ID, "next-page").click()
    until(driver, lambda d: info.text == f"Rows 201{DASH}250 of 250", 20, "the last page")
    assert [r[0] for r in table_rows(driver)[1]] == [str(k) for k in keys[200:]]
    assert driver.find_element(By.ID, "next-page").get_attribute("disabled") is not None
    driver.find_element(By.ID, "prev-page").click()
    until(driver, lambda d: info.text == f"Rows 101{DASH}200 of 250", 20, "the previous page")
    print("screenshot:", shot(driver, tmp_path, "paging"))

    # history: newest first; clicking the Q3 entry shows its result again
    def history(d):
        return d.find_elements(By.CSS_SELECTOR, "#history li[data-query-id]")

    until(driver, lambda d: len(history(d)) >= 2 and "LIMIT 250" in history(d)[0].text, 20, "the history")
    items = history(driver)
    assert items[0].get_attribute("data-status") == "succeeded" and "250 rows" in items[0].text
    q3 = next(li for li in items if "revenue" in (li.get_attribute("title") or ""))
    q3.click()
    until(driver, lambda d: table_rows(d)[0] == expected_columns, 20, "Q3's result from the history")
    assert "10 rows" in driver.find_element(By.ID, "summary").text and len(table_rows(driver)[1]) == 10
    assert "l_orderkey" in driver.find_element(By.ID, "sql").get_attribute("value")

    # explain: the plan of the query in the editor
    driver.find_element(By.ID, "explain").click()
    plan = driver.find_element(By.ID, "plan")
    until(driver, lambda d: plan.is_displayed() and "Stage 1" in plan.text, 30, "the plan")
    print("screenshot:", shot(driver, tmp_path, "plan"))

    # a bad query shows the engine's one-line error
    run_sql(driver, "SELECT nope FROM nation", wait_for=())
    error = driver.find_element(By.ID, "error")
    until(driver, lambda d: error.is_displayed(), 20, "the error")
    assert "BindError" in error.text or "nope" in error.text, error.text


def test_console_shows_what_a_write_wrote(write_server, browser, tmp_path):
    driver = browser
    open_console(driver, write_server)  # another origin: the token again
    run_sql(driver, "COPY (SELECT * FROM nation) TO 'console/nation/' (PARTITION_BY (n_regionkey))")
    summary = driver.find_element(By.ID, "summary")
    until(driver, lambda d: "wrote 25 rows in 5 files" in summary.text, 20, "the write's summary")
    assert f"to {write_server.out}/console/nation/" in summary.text
    columns = ["status", "rows", "files", "bytes", "target"]
    until(driver, lambda d: table_rows(d)[0] == columns, 20, "the one-row summary")
    assert table_rows(driver)[1][0][:3] == ["COPY", "25", "5"]
    driver.find_element(By.ID, "tab-stats").click()
    cards = driver.find_element(By.ID, "stat-cards").text.upper()
    assert "ROWS WRITTEN" in cards and "FILES WRITTEN" in cards

    def newest(d):
        items = d.find_elements(By.CSS_SELECTOR, "#history li[data-query-id]")
        return items[0].text if items else ""

    until(driver, lambda d: "wrote 25 rows in 5 files" in newest(d), 20, "the write in the history")
    print("screenshot:", shot(driver, tmp_path, "write"))


def test_console_shows_progress_and_cancels(slow_server, browser, tmp_path):
    driver = browser
    open_console(driver, slow_server)  # another origin: a fresh sessionStorage, so the token again
    run_sql(driver, "SELECT o_orderstatus, count(*) AS n FROM orders GROUP BY 1", wait_for=())
    until(driver, lambda d: status_of(d) == "running", 30, "the query to run")
    # rank 1 finishes stage 1 at once, rank 0 sleeps 5 s: progress by stage shows 1 of 2 ranks
    until(
        driver,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#stages li[data-stage='1']")
            and "1/2" in d.find_element(By.CSS_SELECTOR, "#stages li[data-stage='1']").text
        ),
        30,
        "progress by stage",
    )
    assert driver.find_element(By.ID, "progress").is_displayed()
    print("screenshot:", shot(driver, tmp_path, "progress"))
    driver.find_element(By.ID, "cancel").click()
    # the event (the query ends cancelled, not succeeded), with a generous ceiling rather than a duration
    until(driver, lambda d: status_of(d) == "cancelled", 120, "the query to be cancelled")
    assert "QueryCancelled" in driver.find_element(By.ID, "error").text
    assert driver.find_element(By.ID, "run").is_enabled()
    print("screenshot:", shot(driver, tmp_path, "cancelled"))


def test_console_shows_running_and_queued_queries(slow_server, browser, tmp_path):
    """The operator's panel lists the running query and the one queued behind it (with its place in line when
    the scheduler gives one), and its ✕ cancels a query."""
    import requests

    driver = browser
    driver.get(slow_server.url + "/")
    driver.execute_script("sessionStorage.clear()")  # an earlier test of this origin may have kept the token
    open_console(driver, slow_server)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    ids = []
    for sql in ("SELECT o_orderpriority, count(*) FROM orders GROUP BY 1", "SELECT count(*) FROM customer"):
        response = requests.post(slow_server.url + "/v1/queries", json={"sql": sql}, headers=auth, timeout=30)
        assert response.status_code == 202, response.text
        ids.append(response.json()["query_id"])

    def shown(
        d, query_id
    ):  # the panel is redrawn every 2 s: read it in one script, not through kept elements
        return d.execute_script(
            "const li = document.querySelector(`#activity li[data-query-id='${arguments[0]}']`);"
            "return li ? li.dataset.status : null;",
            query_id,
        )

    until(driver, lambda d: shown(d, ids[0]) == "running", 30, "the running query in the panel")
    until(driver, lambda d: shown(d, ids[1]) is not None, 30, "the second query in the panel")
    count = driver.find_element(By.ID, "activity-count").text
    assert "running" in count and "queued" in count
    print("screenshot:", shot(driver, tmp_path, "activity"))
    for query_id in ids:
        driver.execute_script(
            "const b = document.querySelector(`#activity li[data-query-id='${arguments[0]}'] button.stop`);"
            "if (b) b.click();",
            query_id,
        )
    until(driver, lambda d: all(shown(d, q) is None for q in ids), 60, "the panel to empty after the cancels")
    for query_id in ids:
        doc = requests.get(f"{slow_server.url}/v1/queries/{query_id}", headers=auth, timeout=30).json()
        assert doc["status"] == "cancelled", doc
