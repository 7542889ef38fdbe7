// The live tail of a namespace, dead letters (redrive, drop) and replays (progress, cancel).
import { call, stream } from "./api.js";
import { clear, field, h, itemResults, json, pager, showError, time } from "./dom.js";

export function tailView(root, ctx) {
  let stop = null;
  const ns = h("input", { name: "namespace", required: true, value: ctx.args[0] || "" });
  const list = h("ol", { class: "tail", id: "tail", "aria-live": "polite", reversed: true });
  const info = h("p", { class: "muted" });
  const toggle = h("button", { type: "submit" }, "Start");
  root.append(
    h("h1", {}, "Live tail"),
    h("form", { class: "inline", onsubmit: (ev) => { ev.preventDefault(); if (stop) halt(); else start(); } },
      field("Namespace", ns), toggle),
    info, list);

  function start() {
    clear(list);
    const namespace = ns.value.trim();
    if (!namespace) return;
    info.textContent = "Connecting to " + namespace + "…";
    toggle.textContent = "Stop";
    let position = null; // the log position of the last event shown: a reconnection resumes there
    const params = () => (position === null ? { namespace } : { namespace, after: position });
    stop = stream("tail", params, (name, data) => {
      if (name === "ready") {
        position = Math.max(position === null ? 0 : position, data.position);
        info.textContent = "Following " + namespace + " (newest first).";
        return;
      }
      if (name !== "event") return;
      position = Math.max(position === null ? 0 : position, data.seq);
      list.prepend(h("li", { "data-event-id": data.id },
        h("div", {}, h("strong", {}, "#" + data.id), " ", h("span", { class: "muted" }, time(data.timestamp) + " from " + data.source)),
        h("pre", {}, json(data.data)),
        data.headers && Object.keys(data.headers).length ? h("pre", { class: "muted" }, "headers " + json(data.headers)) : null));
      while (list.children.length > 500) list.lastChild.remove();
    }, (e) => { info.textContent = ""; showError(info, e); halt(); });
  }
  function halt() { if (stop) stop(); stop = null; toggle.textContent = "Start"; }
  if (ns.value) start();
  return () => halt();
}

export function deadLettersView(root, ctx) {
  const sub = h("input", { name: "subscription", inputmode: "numeric", value: ctx.args[0] || "", placeholder: "all of yours" });
  const box = h("div", { class: "table-wrap" });
  const pagerBox = h("div");
  const out = h("div", { id: "dead-letter-results" });
  let prev = null, prevs = [];
  root.append(
    h("h1", {}, "Dead letters"),
    h("form", { class: "inline", onsubmit: (ev) => { ev.preventDefault(); prevs = []; load(null); } },
      field("Subscription", sub), h("button", { type: "submit" }, "Show")),
    h("div", { class: "toolbar" },
      h("button", { type: "button", id: "redrive", onclick: () => act("tidings_redrive_dead_letters") }, "Redrive selected"),
      h("button", { type: "button", class: "danger", id: "drop", onclick: () => act("tidings_drop_dead_letters") }, "Drop selected")),
    out, box, pagerBox);

  function chosen() { return [...box.querySelectorAll("tbody input[type=checkbox]:checked")].map((c) => Number(c.value)); }
  async function act(method) {
    const ids = chosen();
    if (!ids.length) { showError(out, { message: "select dead letters first" }); return; }
    if (method.includes("drop") && !window.confirm("Drop " + ids.length + " dead letter(s) for good?")) return;
    try { itemResults(out, ids.map((i) => "notification " + i), await call(method, ids)); load(prev); } catch (e) { showError(out, e); }
  }
  async function load(after) {
    const query = { take: 50 };
    if (after !== null) query.prev = after;
    if (sub.value.trim()) query.subscription = Number(sub.value.trim());
    let rows;
    try { rows = await call("tidings_get_dead_letters", query); } catch (e) { showError(box, e); return; }
    prev = after;
    // What is ticked when the answer comes stays ticked: the list is reloaded after every
    // redrive or drop, and a box ticked meanwhile must not be lost.
    const ticked = new Set(chosen());
    const body = h("tbody");
    for (const d of rows) {
      const tick = h("input", { type: "checkbox", value: d.id, "aria-label": "Select dead letter " + d.id });
      tick.checked = ticked.has(d.id);
      body.append(h("tr", { "data-id": d.id },
        h("td", {}, tick),
        h("td", { class: "num" }, String(d.id)), h("td", { class: "num" }, String(d.subscription)), h("td", {}, d.namespace),
        h("td", { class: "num" }, String(d.eventId)), h("td", { class: "num" }, String(d.attempts)), h("td", {}, d.reason),
        h("td", { class: "hide-narrow" }, time(d.timestamp))));
    }
    clear(box).append(h("table", { id: "dead-letters" }, h("thead", {}, h("tr", {},
      h("th", {}, h("input", { type: "checkbox", "aria-label": "Select all shown", onchange: (ev) => {
        for (const c of box.querySelectorAll("tbody input[type=checkbox]")) c.checked = ev.target.checked;
      } })), ...["notification", "subscription"].map((t) => h("th", { class: "num" }, t)), h("th", {}, "namespace"),
      h("th", { class: "num" }, "event"), h("th", { class: "num" }, "attempts"), h("th", {}, "reason"), h("th", { class: "hide-narrow" }, "when"))), body));
    if (!rows.length) box.append(h("p", { class: "muted" }, "No dead letters."));
    clear(pagerBox).append(pager(() => { prevs = []; load(null); },
      rows.length === 50 ? () => { prevs.push(after); load(rows[rows.length - 1].id); } : null, rows.length + " shown"));
  }
  load(null);
  return null;
}

function stat(stats, key) {
  for (const [k, v] of stats) if (k === key) return Object.values(v)[0];
  return null;
}

export function replaysView(root, ctx) {
  const box = h("div", { class: "table-wrap" });
  const out = h("div", { id: "replay-results" });
  const state = h("select", { name: "state" }, ["", "pending", "running", "completed", "canceled", "errored"].map((s) => h("option", { value: s }, s || "any")));
  let timer = null;
  root.append(
    h("h1", {}, "Replays"),
    h("form", { class: "inline", onsubmit: (ev) => { ev.preventDefault(); load(); } }, field("State", state), h("button", { type: "submit" }, "Show")),
    out, box, registerForm());

  let live = true;
  async function load() {
    const query = { take: 100 };
    if (state.value) query.filter = { state: state.value };
    let rows;
    try { rows = await call("icrc77_get_replays", query); } catch (e) { showError(box, e); return; }
    // Keep the keyboard's place across a refresh: the focused row's button is focused again.
    const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest("#replays tr[data-id]") : null;
    const body = h("tbody");
    live = false;
    for (const r of rows) {
      const expected = stat(r.stats, "icrc77:replay:stats:expected") || 0;
      const reached = stat(r.stats, "icrc77:replay:stats:reached") || 0;
      const st = Object.keys(r.status)[0];
      const running = st === "pending" || st === "running";
      live = live || running;
      body.append(h("tr", { "data-id": r.replayId },
        h("td", { class: "num" }, String(r.replayId)), h("td", {}, r.namespace), h("td", {}, "[" + r.range[0] + ", " + (r.range[1] === null ? "latest" : r.range[1]) + ")"),
        h("td", {}, h("span", { class: "badge " + st }, st)),
        h("td", {}, h("progress", { max: Math.max(1, expected), value: reached, "aria-label": "progress of replay " + r.replayId }), " " + reached + "/" + expected),
        h("td", { class: "num" }, String(stat(r.stats, "icrc77:replay:stats:sent") || 0)),
        h("td", { class: "hide-narrow" }, r.requester), h("td", { class: "num hide-narrow" }, String(r.subscription)),
        h("td", {}, running ? h("button", { type: "button", class: "danger", onclick: async () => {
          try { itemResults(out, ["replay " + r.replayId], await call("icrc77_cancel_replay", [r.replayId])); load(); } catch (e) { showError(out, e); }
        } }, "Cancel") : null)));
    }
    clear(box).append(h("table", { id: "replays" }, h("thead", {}, h("tr", {},
      h("th", { class: "num" }, "id"), h("th", {}, "namespace"), h("th", {}, "range"), h("th", {}, "state"), h("th", {}, "progress"),
      h("th", { class: "num" }, "sent"), h("th", { class: "hide-narrow" }, "requester"), h("th", { class: "num hide-narrow" }, "subscription"), h("th", {}, ""))), body));
    if (!rows.length) box.append(h("p", { class: "muted" }, "No replays."));
    if (focused) {
      const again = box.querySelector('tr[data-id="' + focused.dataset.id + '"] button') || box.querySelector("table");
      if (again) again.focus();
    }
  }

  function registerForm() {
    const ns = h("input", { name: "namespace", required: true });
    const from = h("input", { name: "from", inputmode: "numeric", value: "0" });
    const to = h("input", { name: "to", inputmode: "numeric", placeholder: "latest" });
    const res = h("div");
    return h("section", { class: "card" }, h("h2", {}, "Request a replay to your subscription"),
      h("form", { class: "inline", id: "register-replay", onsubmit: async (ev) => {
        ev.preventDefault();
        const reg = { namespace: ns.value.trim(), range: [Number(from.value || 0), to.value.trim() ? Number(to.value) : null] };
        try { itemResults(res, [reg.namespace], await call("icrc77_register_replay", [reg])); load(); } catch (e) { showError(res, e); }
      } }, field("Namespace", ns), field("From event id", from), field("To (exclusive)", to), h("button", { type: "submit" }, "Replay")), res);
  }

  load();
  timer = setInterval(() => { if (live) load(); }, 2000); // refreshed while a replay is pending or running
  return () => clearInterval(timer);
}
