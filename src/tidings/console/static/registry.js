// Subscriptions and publications: searched and paged on the server, live counters and
// charts over server-sent events, and the API's register/stop/start/delete/publish calls.
import { call, get, icrc16, stream } from "./api.js";
import { LineChart, SERIES, sample } from "./charts.js";
import { clear, field, h, itemResults, json, pager, showError, status } from "./dom.js";

const COUNTERS = [["sent", "sent"], ["confirmed", "confirmed"], ["pending", "pending"], ["retries", "retries"], ["deadLetters", "dead letters"]];

export function subscriptionsView(root, ctx) {
  let stopFeed = null;
  let cursor = null, cursors = [], selected = ctx.args[0] ? Number(ctx.args[0]) : null;
  const history = new Map(); // id -> [[t, values]]
  const last = new Map();    // id -> [t, counters]
  let chart = null;

  const q = h("input", { type: "search", name: "q", "aria-label": "Search subscriptions", placeholder: "id, namespace or subscriber" });
  const tableBox = h("div", { class: "table-wrap" });
  const pagerBox = h("div");
  const detail = h("div", { class: "card", id: "subscription-detail" }, h("p", { class: "muted" }, "Select a subscription to see its configuration and live charts."));
  const form = createForm();

  root.append(
    h("h1", {}, "Subscriptions"),
    h("form", { class: "inline", role: "search", onsubmit: (ev) => { ev.preventDefault(); cursors = []; load(null); } },
      field("Search", q), h("button", { type: "submit" }, "Search")),
    h("div", { class: "grid" }, h("div", {}, tableBox, pagerBox), detail),
    form);

  async function load(after) {
    let page;
    try { page = await get("subscriptions", { q: q.value, after, take: 20 }); } catch (e) { showError(tableBox, e); return; }
    cursor = after;
    renderTable(page);
    clear(pagerBox).append(pager(
      () => { cursors = []; load(null); },
      page.next !== null ? () => { cursors.push(cursor); load(page.next); } : null,
      page.total + " match" + (page.total === 1 ? "" : "es")));
    watch(page.items.map((s) => s.id));
    if (selected === null && page.items.length) select(page.items[0]);
    else { const s = page.items.find((x) => x.id === selected); if (s) select(s); }
  }

  function renderTable(page) {
    const body = h("tbody");
    for (const s of page.items) {
      const row = h("tr", { "data-id": s.id, class: s.id === selected ? "selected" : null },
        h("td", {}, h("button", { type: "button", class: "secondary", "aria-label": "Show subscription " + s.id, onclick: () => select(s) }, String(s.id))),
        h("td", {}, s.namespace), h("td", { class: "hide-narrow" }, s.subscriber),
        h("td", {}, h("span", { class: "badge " + (s.stopped ? "stopped" : "active") }, s.stopped ? "stopped" : "active")),
        ...COUNTERS.map(([k]) => h("td", { class: "num", "data-stat": k }, String(s.stats[k]))));
      body.append(row);
    }
    clear(tableBox).append(h("table", { id: "subscriptions" },
      h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "namespace"), h("th", { class: "hide-narrow" }, "subscriber"),
        h("th", {}, "state"), ...COUNTERS.map(([, label]) => h("th", { class: "num" }, label)))),
      body));
    if (!page.items.length) tableBox.append(h("p", { class: "muted" }, "No subscription you may see matches."));
  }

  function watch(ids) {
    if (stopFeed) stopFeed();
    if (!ids.length) { stopFeed = null; return; }
    stopFeed = stream("stats", { ids: ids.join(",") }, (name, data) => {
      if (name !== "stats") return;
      for (const [id, counters] of Object.entries(data.subs)) {
        const n = Number(id);
        const prev = last.get(n);
        const values = sample(prev && prev[1], counters, prev ? (data.t - prev[0]) / 1000 : 0);
        last.set(n, [data.t, counters]);
        if (!history.has(n)) history.set(n, []);
        const hist = history.get(n); hist.push([data.t, values]); if (hist.length > 60) hist.shift();
        const row = tableBox.querySelector('tr[data-id="' + n + '"]');
        if (row) for (const [k] of COUNTERS) { const td = row.querySelector('[data-stat="' + k + '"]'); if (td) td.textContent = String(counters[k]); }
        if (n === selected && chart) { chart.push(data.t, values); showNow(counters, values); }
      }
    }, (e) => status(e.message));
  }

  function showNow(counters, values) {
    const now = detail.querySelector(".now");
    if (!now) return;
    now.textContent = SERIES.map((name, i) => name + " " + (Math.round(values[i] * 10) / 10)).join(" · ") +
      " · published " + counters.published + " · sent " + counters.sent;
  }

  function select(s) {
    selected = s.id;
    for (const tr of tableBox.querySelectorAll("tr[data-id]")) tr.classList.toggle("selected", Number(tr.dataset.id) === s.id);
    const canvas = h("canvas", { class: "chart", id: "chart", role: "img", "aria-label": "Live chart of subscription " + s.id });
    const out = h("div", { class: "action-results" });
    // The panel is drawn again from the refreshed row: the answer goes into the new panel.
    const act = (method, label) => h("button", { type: "button", class: method.includes("delete") ? "danger" : "secondary", onclick: async () => {
      if (method.includes("delete") && !window.confirm("Delete subscription " + s.id + "?")) return;
      let results;
      try { results = await call(method, [s.id]); } catch (e) { showError(out, e); return; }
      await load(cursor);
      const now = detail.querySelector(".action-results") || out;
      itemResults(now, [label + " " + s.id], results);
      const again = detail.querySelector(".toolbar button");
      if (again) again.focus();
    } }, label);
    clear(detail).append(
      h("h2", {}, "Subscription " + s.id + " on " + s.namespace),
      h("ul", { class: "legend", "aria-hidden": "true" }, SERIES.map((n, i) => h("li", { class: "s" + i }, n))),
      canvas,
      h("p", { class: "now muted", "aria-live": "off" }, "waiting for the first sample…"),
      h("div", { class: "toolbar" },
        // Only its controllers may change it (the API refuses anyone else): others get no buttons.
        s.controlled ? (s.stopped ? act("icrc72_start_subscription", "Start") : act("icrc72_stop_subscription", "Stop")) : null,
        s.controlled ? act("icrc72_delete_subscription", "Delete") : null,
        h("a", { href: "#/dead-letters/" + s.id }, "Dead letters"),
        h("a", { href: "#/tail/" + encodeURIComponent(s.namespace) }, "Tail namespace")),
      out,
      h("dl", {},
        h("dt", {}, "subscriber"), h("dd", {}, s.subscriber),
        h("dt", {}, "endpoint"), h("dd", {}, s.endpoint === null ? "(hidden: only its subscriber and admins see it)" : s.endpoint),
        h("dt", {}, "mode"), h("dd", {}, s.mode)),
      h("h2", {}, "Configuration"), h("pre", { class: "config" }, json(s.config)));
    chart = new LineChart(canvas, SERIES);
    for (const [t, v] of history.get(s.id) || []) chart.push(t, v);
  }

  function createForm() {
    const ns = h("input", { name: "namespace", required: true });
    const endpoint = h("input", { name: "endpoint", type: "url", placeholder: "https://…" });
    const mode = h("select", { name: "mode" }, h("option", { value: "trusted" }, "trusted"), h("option", { value: "oneshot" }, "oneshot"));
    const filter = h("input", { name: "filter", placeholder: "optional filter" });
    const out = h("div");
    return h("section", { class: "card" }, h("h2", {}, "Register a subscription"),
      h("form", { class: "inline", id: "create-subscription", onsubmit: async (ev) => {
        ev.preventDefault();
        const reg = { namespace: ns.value.trim(), mode: mode.value };
        if (endpoint.value.trim()) reg.endpoint = endpoint.value.trim();
        if (filter.value.trim()) reg.filter = filter.value.trim();
        try { itemResults(out, [reg.namespace], await call("icrc72_register_subscription", [reg])); load(null); } catch (e) { showError(out, e); }
      } }, field("Namespace", ns), field("Endpoint", endpoint), field("Mode", mode), field("Filter", filter),
      h("button", { type: "submit" }, "Register")), out);
  }

  load(null);
  return () => { if (stopFeed) stopFeed(); };
}

const PUB_STATS = ["events", "notifications", "confirmations"];

export function publicationsView(root, ctx) {
  let cursor = null;
  // Live statistics: the shown page is read again every two seconds and its counters
  // patched in place (the rows, and the keyboard's place in them, stay).
  const timer = setInterval(async () => {
    let page;
    try { page = await get("publications", { q: q.value, after: cursor, take: 25 }); } catch (e) { return; }
    for (const p of page.items) {
      const row = tableBox.querySelector('tr[data-namespace="' + CSS.escape(p.namespace) + '"]');
      if (row) for (const k of PUB_STATS) row.querySelector('[data-stat="' + k + '"]').textContent = String(p[k]);
    }
  }, 2000);
  const q = h("input", { type: "search", name: "q", "aria-label": "Search publications", placeholder: "namespace or owner" });
  const tableBox = h("div", { class: "table-wrap" });
  const pagerBox = h("div");
  const out = h("div");

  root.append(
    h("h1", {}, "Publications"),
    h("form", { class: "inline", role: "search", onsubmit: (ev) => { ev.preventDefault(); load(null); } },
      field("Search", q), h("button", { type: "submit" }, "Search")),
    tableBox, pagerBox, out, createForm(), publishForm());

  async function load(after) {
    let page;
    try { page = await get("publications", { q: q.value, after, take: 25 }); } catch (e) { showError(tableBox, e); return; }
    cursor = after;
    const body = h("tbody");
    for (const p of page.items) {
      body.append(h("tr", { "data-namespace": p.namespace },
        h("td", {}, p.namespace), h("td", {}, p.owner),
        ...PUB_STATS.map((k) => h("td", { class: "num", "data-stat": k }, String(p[k]))),
        h("td", { class: "hide-narrow" }, p.publishers.join(", ")),
        h("td", { class: "hide-narrow" }, h("pre", {}, json(p.config))),
        h("td", {}, h("a", { href: "#/tail/" + encodeURIComponent(p.namespace) }, "Tail"), " ",
          p.controlled ? h("button", { type: "button", class: "danger", onclick: async () => {
            if (!window.confirm("Delete publication " + p.namespace + "? Its subscriptions end.")) return;
            try { itemResults(out, [p.namespace], await call("icrc72_delete_publication", [p.namespace])); load(cursor); } catch (e) { showError(out, e); }
          } }, "Delete") : null)));
    }
    clear(tableBox).append(h("table", { id: "publications" },
      h("thead", {}, h("tr", {}, ...["namespace", "owner", "events", "notifications", "confirmations"].map((t, i) => h("th", { class: i > 1 ? "num" : null }, t)),
        h("th", { class: "hide-narrow" }, "publishers"), h("th", { class: "hide-narrow" }, "config"), h("th", {}, ""))), body));
    clear(pagerBox).append(pager(() => load(null), page.next !== null ? () => load(page.next) : null, page.total + " publications"));
  }

  function createForm() {
    const ns = h("input", { name: "namespace", required: true });
    const config = h("textarea", { name: "config", placeholder: '{"icrc72:publication:subscribers:allowed:list": ["alice"]} (plain JSON, optional)' });
    const res = h("div");
    return h("section", { class: "card" }, h("h2", {}, "Register a publication"),
      h("form", { id: "create-publication", onsubmit: async (ev) => {
        ev.preventDefault();
        let pairs = [];
        if (config.value.trim()) {
          try { pairs = Object.entries(JSON.parse(config.value)).map(([k, v]) => [k, icrc16(v)]); }
          catch (e) { showError(res, { message: "the configuration is not a JSON object: " + e.message }); return; }
        }
        try { itemResults(res, [ns.value.trim()], await call("icrc72_register_publication", [{ namespace: ns.value.trim(), config: pairs }])); load(null); }
        catch (e) { showError(res, e); }
      } }, h("div", { class: "inline" }, field("Namespace", ns)), field("Configuration", config), h("button", { type: "submit" }, "Register")), res);
  }

  function publishForm() {
    const ns = h("input", { name: "namespace", required: true });
    const data = h("textarea", { name: "data", placeholder: '{"order": 1} (plain JSON; sent as ICRC-16)' });
    const res = h("div");
    return h("section", { class: "card" }, h("h2", {}, "Publish an event"),
      h("form", { id: "publish", onsubmit: async (ev) => {
        ev.preventDefault();
        let value;
        try { value = JSON.parse(data.value || "null"); } catch (e) { showError(res, { message: "the data is not JSON: " + e.message }); return; }
        try { itemResults(res, [ns.value.trim()], await call("icrc72_publish", [{ namespace: ns.value.trim(), data: icrc16(value) }])); load(cursor); }
        catch (e) { showError(res, e); }
      } }, h("div", { class: "inline" }, field("Namespace", ns)), field("Data", data), h("button", { type: "submit" }, "Publish")), res);
  }

  load(null);
  return () => clearInterval(timer);
}
