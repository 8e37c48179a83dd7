// Squall console: a single page over the REST API (v1/queries, v1/explain, v1/tables). No build step.
"use strict";

(() => {
  const PAGE_ROWS = 100;
  const HISTORY_ROWS = 25;
  const ACTIVITY_ROWS = 100;
  const ACTIVITY_EVERY_MS = 2000;
  const TOKEN_KEY = "squall.token";
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
  const $ = (id) => document.getElementById(id);

  const state = {
    queryId: null, // the query shown
    doc: null, // its last status document
    running: false,
    pollTimer: null,
    tickTimer: null,
    startedAt: 0,
    offset: 0,
    total: 0,
    historyToken: null,
    historyItems: [],
    activityTimer: null,
    me: null, // the signed-in user (GET /v1/whoami)
  };

  // --- HTTP -------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, error, detail) {
      super(detail);
      this.status = status;
      this.error = error;
    }
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || "";

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (token()) headers.Authorization = "Bearer " + token();
    const init = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiError(0, "NetworkError", "cannot reach the server (" + err.message + ")");
    }
    if (!response.ok) {
      let error = "HTTP " + response.status;
      let detail = response.statusText;
      try {
        const doc = await response.json();
        error = doc.error || error;
        detail = doc.detail || detail;
      } catch (_) {
        /* not JSON */
      }
      if (response.status === 401) showTokenDialog(detail);
      throw new ApiError(response.status, error, detail);
    }
    return response;
  }

  const apiJson = async (method, path, body) => (await api(method, path, body)).json();

  // --- formatting -------------------------------------------------------------------------------

  const fmtInt = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));
  const fmtSeconds = (s) => (s === null || s === undefined ? "—" : s < 10 ? s.toFixed(2) + " s" : s.toFixed(1) + " s");
  function fmtBytes(n) {
    if (n === null || n === undefined) return "—";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) {
      n /= 1000;
      i++;
    }
    return (i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)) + " " + units[i];
  }
  // a write statement: "wrote 25 rows in 5 files (6.0 KB)"
  const fmtWritten = (w) =>
    `wrote ${fmtInt(w.rows)} rows in ${fmtInt(w.files)} file${w.files === 1 ? "" : "s"} (${fmtBytes(w.bytes)})`;
  function fmtCost(usd) {
    if (usd === null || usd === undefined) return null;
    return "$" + (usd < 0.01 ? usd.toPrecision(3) : usd.toFixed(4));
  }
  function fmtAgo(t) {
    if (!t) return "";
    const s = Date.now() / 1000 - t;
    if (s < 60) return "just now";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return new Date(t * 1000).toLocaleDateString();
  }
  function fmtCell(v) {
    if (v === null || v === undefined) return { text: "NULL", cls: "null" };
    if (typeof v === "number") return { text: String(v), cls: "num" };
    if (typeof v === "object") return { text: JSON.stringify(v), cls: "" };
    return { text: String(v), cls: "" };
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  // --- status, progress, errors -----------------------------------------------------------------

  const LABELS = { queued: "Queued", running: "Running", succeeded: "Succeeded", failed: "Failed", cancelled: "Cancelled", idle: "Ready" };

  function setStatus(status, extra) {
    const node = $("status");
    node.dataset.state = status;
    node.textContent = (LABELS[status] || status) + (extra ? " · " + extra : "");
  }

  function setRunning(running) {
    state.running = running;
    $("run").disabled = running;
    $("cancel").disabled = !running;
    clearInterval(state.tickTimer);
    if (running) {
      state.startedAt = Date.now();
      state.tickTimer = setInterval(() => {
        if (state.doc && !TERMINAL.has(state.doc.status)) {
          const q = state.doc.status === "queued" && state.doc.queue ? fmtQueue(state.doc.queue) + " · " : "";
          setStatus(state.doc.status, q + ((Date.now() - state.startedAt) / 1000).toFixed(1) + " s");
        }
      }, 200);
    }
  }

  function renderProgress(progress, status) {
    const box = $("progress");
    if (!progress) {
      box.hidden = !(status === "running" || status === "queued");
      $("progress-fill").style.width = "0%";
      $("progress-text").textContent = status === "queued" ? "waiting for a free slot…" : "planning…";
      $("stages").replaceChildren();
      return;
    }
    box.hidden = false;
    const pct = Math.round(progress.fraction * 100);
    $("progress-fill").style.width = pct + "%";
    $("progress-text").textContent = `${progress.stages_done}/${progress.stages} stages · ${pct}%`;
    const items = [];
    for (let stage = 1; stage <= progress.stages; stage++) {
      const done = Math.min(progress.ranks_done[String(stage)] || 0, progress.world_size);
      const fill = el("div", { class: "fill" });
      fill.style.width = Math.round((100 * done) / progress.world_size) + "%";
      items.push(
        el(
          "li",
          { class: done >= progress.world_size ? "done" : "", "data-stage": String(stage) },
          el("span", {}, "Stage " + stage),
          el("div", { class: "bar" }, fill),
          el("span", {}, `${done}/${progress.world_size}`),
        ),
      );
    }
    $("stages").replaceChildren(...items);
  }

  function showError(err) {
    const box = $("error");
    box.replaceChildren(el("strong", {}, (err.error || "Error") + ": "), String(err.detail || err.message || err));
    box.hidden = false;
    $("result-empty").hidden = true;
    selectTab("result");
  }

  function resetResult() {
    $("error").hidden = true;
    $("result-wrap").hidden = true;
    $("pager").hidden = true;
    $("result-empty").hidden = false;
    $("result-empty").textContent = "Running…";
    $("stats").hidden = true;
    $("stats-empty").hidden = false;
    $("summary").textContent = "";
    $("progress").classList.remove("stopped");
    renderProgress(null, "queued");
  }

  // --- running a query --------------------------------------------------------------------------

  function requestBody() {
    const body = { sql: $("sql").value.trim() };
    const workers = parseInt($("workers").value, 10);
    if (workers > 0) body.workers = workers;
    return body;
  }

  async function run() {
    const body = requestBody();
    if (!body.sql || state.running) return;
    clearTimeout(state.pollTimer);
    resetResult();
    selectTab("result");
    state.doc = { status: "queued" };
    setRunning(true);
    setStatus("queued", "submitting");
    try {
      const accepted = await apiJson("POST", "v1/queries", body);
      state.queryId = accepted.query_id;
      loadHistory();
      poll(accepted.query_id);
    } catch (err) {
      setRunning(false);
      setStatus("failed");
      $("progress").hidden = true;
      showError(err);
    }
  }

  async function poll(id) {
    if (id !== state.queryId) return;
    let doc;
    try {
      doc = await apiJson("GET", "v1/queries/" + id);
    } catch (err) {
      if ([401, 404, 410].includes(err.status)) {
        setRunning(false);
        setStatus("failed");
        showError(err);
        return;
      }
      state.pollTimer = setTimeout(() => poll(id), 1000);
      return;
    }
    if (id !== state.queryId) return;
    state.doc = doc;
    renderProgress(doc.progress, doc.status);
    if (TERMINAL.has(doc.status)) {
      await finish(doc);
    } else {
      const waiting = doc.status === "queued" && doc.queue ? fmtQueue(doc.queue) + " · " : "";
      setStatus(doc.status, waiting + ((Date.now() - state.startedAt) / 1000).toFixed(1) + " s");
      // 4 polls a second at first, slowing to one a second for long queries
      state.pollTimer = setTimeout(() => poll(id), Math.min(1000, 250 + (Date.now() - state.startedAt) / 20));
    }
  }

  async function finish(doc) {
    setRunning(false);
    state.doc = doc;
    const stats = doc.stats || {};
    setStatus(doc.status, stats.elapsed_s !== undefined ? fmtSeconds(stats.elapsed_s) : "");
    if (doc.status !== "succeeded") $("progress").hidden = !doc.progress;
    $("progress").classList.toggle("stopped", doc.status !== "succeeded");
    renderStats(doc);
    markHistory();
    if (doc.status === "succeeded") {
      await showPage(0);
    } else {
      $("result-empty").textContent = "";
      showError(doc.error || { error: doc.status, detail: "query " + doc.status });
    }
    loadHistory();
  }

  async function cancel() {
    if (!state.queryId || !state.running) return;
    $("cancel").disabled = true;
    setStatus("running", "cancelling");
    try {
      const doc = await apiJson("DELETE", "v1/queries/" + state.queryId);
      state.doc = doc;
    } catch (err) {
      if (err.status !== 409) showError(err); // 409: it finished meanwhile
    }
  }

  // --- result table -----------------------------------------------------------------------------

  async function showPage(offset) {
    const id = state.queryId;
    let response;
    try {
      response = await api("GET", `v1/queries/${id}/result?format=json&offset=${offset}&limit=${PAGE_ROWS}`);
    } catch (err) {
      showError(err);
      return;
    }
    const rows = await response.json();
    if (id !== state.queryId) return;
    state.offset = offset;
    state.total = parseInt(response.headers.get("X-Total-Rows") || String(rows.length), 10);
    const columns = (state.doc.result && state.doc.result.columns) || Object.keys(rows[0] || {});
    renderTable(columns, rows, offset);
  }

  function renderTable(columns, rows, offset) {
    const table = $("result");
    const numeric = columns.map((c) => rows.some((r) => typeof r[c] === "number"));
    const head = el("tr", {}, el("th", { class: "rownum" }, "#"));
    columns.forEach((c, i) => head.append(el("th", { class: numeric[i] ? "num" : "" }, c)));
    table.tHead.replaceChildren(head);
    const body = rows.map((row, r) => {
      const tr = el("tr", {}, el("td", { class: "rownum" }, String(offset + r + 1)));
      for (const c of columns) {
        const cell = fmtCell(row[c]);
        tr.append(el("td", { class: cell.cls }, cell.text));
      }
      return tr;
    });
    table.tBodies[0].replaceChildren(...body);
    $("result-empty").hidden = rows.length > 0 || state.total > 0;
    $("result-empty").textContent = "The query returned no rows.";
    $("result-wrap").hidden = columns.length === 0;
    $("result-wrap").scrollTop = 0;
    const last = offset + rows.length;
    $("pager").hidden = state.total <= PAGE_ROWS;
    $("page-info").textContent = rows.length
      ? `Rows ${fmtInt(offset + 1)}–${fmtInt(last)} of ${fmtInt(state.total)}`
      : `No rows past ${fmtInt(offset)} (of ${fmtInt(state.total)})`;
    $("prev-page").disabled = offset <= 0;
    $("next-page").disabled = last >= state.total;
  }

  // --- stats and plan ---------------------------------------------------------------------------

  function renderStats(doc) {
    const stats = doc.stats;
    const cost = fmtCost(stats && stats.cost_usd);
    const written = doc.written || (stats && stats.written);
    if (doc.status === "succeeded" && stats) {
      const parts = written
        ? [fmtWritten(written) + " to " + written.target, fmtSeconds(stats.elapsed_s)]
        : [fmtInt(stats.rows) + " rows", fmtSeconds(stats.elapsed_s)];
      if (cost) parts.push(cost);
      $("summary").textContent = parts.join(" · ");
    }
    if (!stats) {
      $("stats").hidden = true;
      $("stats-empty").hidden = false;
      return;
    }
    const cards = [
      ["Elapsed", fmtSeconds(stats.elapsed_s)],
      ...(written
        ? [["Rows written", fmtInt(written.rows)], ["Files written", fmtInt(written.files)], ["Bytes written", fmtBytes(written.bytes)]]
        : [["Rows", fmtInt(stats.rows)]]),
      ["Scanned", fmtBytes(stats.bytes_scanned)],
      ["Rows scanned", fmtInt(stats.rows_scanned)],
      ["Workers", fmtInt(stats.workers)],
      ["Cost", cost || "— (" + (stats.platform || "local") + ")"],
    ];
    $("stat-cards").replaceChildren(
      ...cards.map(([label, value]) => el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value" }, value))),
    );
    const head = ["Stage", "Ranks", "Output", "Rows in", "Rows out", "Bytes out", "Time"];
    $("stage-stats").tHead.replaceChildren(el("tr", {}, ...head.map((h, i) => el("th", { class: i > 2 ? "num" : "" }, h))));
    $("stage-stats").tBodies[0].replaceChildren(
      ...(stats.stages || []).map((s) =>
        el(
          "tr",
          {},
          el("td", {}, String(s.stage)),
          el("td", {}, String(s.ranks)),
          el("td", {}, s.output + (s.note ? " · " + s.note : "")),
          el("td", { class: "num" }, fmtInt(s.rows_in)),
          el("td", { class: "num" }, fmtInt(s.rows_out)),
          el("td", { class: "num" }, fmtBytes(s.bytes_out)),
          el("td", { class: "num" }, fmtSeconds(s.time_s)),
        ),
      ),
    );
    $("stats").hidden = false;
    $("stats-empty").hidden = true;
  }

  async function explain() {
    const body = requestBody();
    if (!body.sql) return;
    selectTab("plan");
    $("plan-empty").hidden = false;
    $("plan-empty").textContent = "Planning…";
    $("plan").hidden = true;
    try {
      const doc = await apiJson("POST", "v1/explain", body);
      $("plan").textContent = doc.text;
      $("plan").hidden = false;
      $("plan-empty").hidden = true;
    } catch (err) {
      $("plan-empty").textContent = (err.error || "Error") + ": " + (err.detail || err.message);
    }
  }

  function selectTab(name) {
    for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.tab === name);
    for (const panel of document.querySelectorAll(".tab-panel")) panel.hidden = panel.dataset.panel !== name;
  }

  // --- sidebar: tables and history --------------------------------------------------------------

  function insertAtCursor(text) {
    const area = $("sql");
    const start = area.selectionStart;
    area.setRangeText(text, start, area.selectionEnd, "end");
    area.focus();
  }

  async function loadTables() {
    const doc = await apiJson("GET", "v1/tables");
    $("tables-count").textContent = doc.tables.length ? String(doc.tables.length) : "";
    const items = doc.tables.map((t) => {
      const columns = el(
        "ul",
        { class: "columns", hidden: "" },
        ...t.columns.map((c) =>
          el("li", { title: "insert " + c.name, onclick: () => insertAtCursor(c.name) }, el("span", {}, c.name), el("span", { class: "type" }, c.type)),
        ),
      );
      const name = el(
        "button",
        { type: "button", class: "table-name", title: "show columns; double-click to insert the name" },
        el("span", {}, t.name),
        el("span", { class: "rows" }, t.rows === null || t.rows === undefined ? "" : fmtInt(t.rows) + " rows"),
      );
      name.addEventListener("click", () => (columns.hidden = !columns.hidden));
      name.addEventListener("dblclick", () => insertAtCursor(t.name));
      return el("li", {}, name, columns);
    });
    $("tables").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "no tables")]));
  }

  async function loadHistory(more) {
    const query = more && state.historyToken ? "&page_token=" + encodeURIComponent(state.historyToken) : "";
    let doc;
    try {
      doc = await apiJson("GET", `v1/queries?limit=${HISTORY_ROWS}${query}`);
    } catch (_) {
      return;
    }
    state.historyItems = more ? state.historyItems.concat(doc.queries) : doc.queries;
    state.historyToken = doc.next_page_token;
    $("history-more").hidden = !doc.next_page_token;
    const items = state.historyItems.map((q) => {
      const meta = [LABELS[q.status] || q.status];
      if (q.written) meta.push(fmtWritten(q.written));
      else if (q.rows !== null && q.rows !== undefined) meta.push(fmtInt(q.rows) + " rows");
      if (q.elapsed_s !== null && q.elapsed_s !== undefined) meta.push(fmtSeconds(q.elapsed_s));
      if (fmtCost(q.cost_usd)) meta.push(fmtCost(q.cost_usd));
      meta.push(fmtAgo(q.created_at));
      if (q.user && q.user !== state.me) meta.push("by " + q.user); // an admin sees every user's queries
      return el(
        "li",
        { "data-query-id": q.query_id, "data-status": q.status, title: q.sql, onclick: () => openQuery(q.query_id) },
        el("span", { class: "dot " + q.status }),
        el("span", { class: "sql" }, q.sql.replace(/\s+/g, " ")),
        el("span", { class: "meta" }, meta.filter(Boolean).join(" · ")),
      );
    });
    $("history").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "no queries yet")]));
    markHistory();
  }

  // where a queued query waits: "#2 in line (1 ahead) · ~12 s · group adhoc"
  function fmtQueue(queue) {
    const parts = [];
    if (queue.position !== null && queue.position !== undefined) {
      parts.push("#" + queue.position + " in line" + (queue.ahead ? " (" + queue.ahead + " ahead)" : ""));
    }
    if (queue.estimated_wait_s !== null && queue.estimated_wait_s !== undefined) {
      parts.push("~" + fmtSeconds(queue.estimated_wait_s));
    }
    if (queue.group) parts.push("group " + queue.group);
    return parts.join(" · ");
  }

  // the operator's view: every running and queued query (queued ones by their place in line)
  async function loadActivity() {
    clearTimeout(state.activityTimer);
    let doc;
    try {
      doc = await apiJson("GET", `v1/queries?status=running,queued&limit=${ACTIVITY_ROWS}`);
    } catch (err) {
      if (err.status !== 401) state.activityTimer = setTimeout(loadActivity, ACTIVITY_EVERY_MS * 2);
      return;
    }
    const running = doc.queries.filter((q) => q.status === "running");
    const queued = doc.queries.filter((q) => q.status === "queued");
    const place = (q) => (q.queue && q.queue.position !== null && q.queue.position !== undefined ? q.queue.position : 1e9);
    queued.sort((a, b) => place(a) - place(b) || (a.created_at || 0) - (b.created_at || 0));
    const item = (q) => {
      const meta = [LABELS[q.status]];
      if (q.status === "queued" && q.queue) meta.push(fmtQueue(q.queue));
      const since = q.status === "running" ? q.started_at : q.created_at;
      if (since) meta.push(fmtSeconds(Math.max(0, Date.now() / 1000 - since)));
      if (q.user && q.user !== state.me) meta.push("by " + q.user);
      const stop = el("button", { type: "button", class: "ghost small stop", title: "Cancel this query" }, "✕");
      stop.addEventListener("click", async (event) => {
        event.stopPropagation();
        try {
          await api("DELETE", "v1/queries/" + q.query_id);
        } catch (_) {
          /* finished meanwhile */
        }
        loadActivity();
      });
      return el(
        "li",
        { "data-query-id": q.query_id, "data-status": q.status, title: q.sql, onclick: () => openQuery(q.query_id) },
        el("span", { class: "dot " + q.status }),
        el("span", { class: "sql" }, q.sql.replace(/\s+/g, " ")),
        el("span", { class: "meta" }, meta.filter(Boolean).join(" · ")),
        stop,
      );
    };
    const items = running.concat(queued).map(item);
    $("activity-count").textContent = `${running.length} running · ${queued.length} queued`;
    $("activity").replaceChildren(...(items.length ? items : [el("li", { class: "muted" }, "nothing running")]));
    if (!document.hidden) state.activityTimer = setTimeout(loadActivity, ACTIVITY_EVERY_MS);
  }

  function markHistory() {
    for (const li of $("history").children) li.classList.toggle("current", li.dataset.queryId === state.queryId);
  }

  async function openQuery(id) {
    if (state.running && id === state.queryId) return;
    clearTimeout(state.pollTimer);
    let doc;
    try {
      doc = await apiJson("GET", "v1/queries/" + id);
    } catch (err) {
      showError(err);
      return;
    }
    state.queryId = id;
    state.doc = doc;
    if (doc.sql) $("sql").value = doc.sql;
    resetResult();
    selectTab("result");
    renderProgress(doc.progress, doc.status);
    if (TERMINAL.has(doc.status)) {
      await finish(doc);
    } else {
      setRunning(true);
      poll(id);
    }
  }

  // --- token ------------------------------------------------------------------------------------

  function showTokenDialog(detail) {
    const dialog = $("token-dialog");
    if (!dialog.hidden) return;
    $("token-message").textContent = token() && detail ? "The server said: " + detail : "";
    $("token-message").hidden = !(token() && detail);
    $("token-input").value = token();
    dialog.hidden = false;
    $("token-input").focus();
  }

  function updateTokenButton() {
    $("token-button").textContent = token() ? "Token ✓" : "Token";
    $("token-button").classList.toggle("set", Boolean(token()));
  }

  async function loadWhoami() {
    const who = await apiJson("GET", "v1/whoami");
    state.me = who.user;
    const shown = who.user === "anonymous" ? "" : who.user + (who.role === "admin" ? " (admin)" : "");
    $("whoami").textContent = shown ? "Signed in as " + shown : "";
    $("whoami").title = who.catalogs ? "may read: " + who.catalogs.join(", ") : "may read every table";
  }

  // --- wiring -----------------------------------------------------------------------------------

  async function init() {
    updateTokenButton();
    $("whoami").textContent = "";
    try {
      const health = await (await fetch("healthz")).json();
      $("version").textContent = "v" + health.version;
    } catch (_) {
      /* an older server */
    }
    try {
      await loadWhoami();
      await loadTables();
      await loadHistory();
      await loadActivity();
    } catch (err) {
      if (err.status !== 401) showError(err);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("run").addEventListener("click", run);
    $("cancel").addEventListener("click", cancel);
    $("explain").addEventListener("click", explain);
    $("prev-page").addEventListener("click", () => showPage(Math.max(0, state.offset - PAGE_ROWS)));
    $("next-page").addEventListener("click", () => showPage(state.offset + PAGE_ROWS));
    $("history-refresh").addEventListener("click", () => loadHistory());
    $("history-more").addEventListener("click", () => loadHistory(true));
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) loadActivity();
    });
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => selectTab(tab.dataset.tab));
    $("token-button").addEventListener("click", () => showTokenDialog());
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
      $("token-dialog").hidden = true;
      init();
    });
    $("token-clear").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $("token-input").value = "";
      updateTokenButton();
    });
    $("sql").addEventListener("keydown", (event) => {
      if ((event.ctrlKey || event.metaKey) && event.key === "Enter") {
        event.preventDefault();
        run();
      } else if (event.key === "Tab" && !event.shiftKey) {
        event.preventDefault();
        insertAtCursor("  ");
      } else if (event.key === "Escape" && state.running) {
        cancel();
      }
    });
    init();
  });
})();
