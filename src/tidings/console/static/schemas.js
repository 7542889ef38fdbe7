// The schema registry: schemas and their states, the versions of a name, a line diff
// between two versions, a compatibility check, registration and (admins) state changes.
import { call } from "./api.js";
import { clear, field, h, itemResults, pager, showError, time } from "./dom.js";

export function schemasView(root, ctx) {
  const nameFilter = h("input", { name: "name", placeholder: "any name" });
  const state = h("select", { name: "state" }, ["", "Active", "Deprecated", "Retracted"].map((s) => h("option", { value: s }, s || "any")));
  const box = h("div", { class: "table-wrap" });
  const pagerBox = h("div");
  const out = h("div");
  root.append(
    h("h1", {}, "Schema registry"),
    h("form", { class: "inline", onsubmit: (ev) => { ev.preventDefault(); load(null); } },
      field("Name", nameFilter), field("State", state), h("button", { type: "submit" }, "Show")),
    out, box, pagerBox,
    h("div", { class: "grid" }, versionsPanel(), checkPanel()),
    registerPanel());

  async function load(prev) {
    const q = { take: 25 };
    if (prev !== null) q.prev = prev;
    if (nameFilter.value.trim()) q.name = nameFilter.value.trim();
    if (state.value) q.state = state.value;
    let rows;
    try { rows = await call("tidings_get_schemas", q); } catch (e) { showError(box, e); return; }
    const body = h("tbody");
    for (const s of rows) {
      const st = s.validity.state;
      const change = (to) => h("button", { type: "button", class: "secondary", onclick: async () => {
        try { itemResults(out, ["schema " + s.id], await call("update_schema_state", [{ id: s.id, state: to }])); load(prev); } catch (e) { showError(out, e); }
      } }, to === "Active" ? "Reactivate" : to === "Deprecated" ? "Deprecate" : "Retract");
      body.append(h("tr", { "data-id": s.id },
        h("td", { class: "num" }, String(s.id)),
        h("td", {}, s.versions.map((v) => v.name + " v" + v.version).join(", ") || "(unnamed)"),
        h("td", {}, s.format), h("td", {}, h("span", { class: "badge " + st }, st)),
        h("td", { class: "hide-narrow" }, s.created_by), h("td", { class: "hide-narrow" }, time(s.created_at)),
        h("td", {}, ctx.me.admin ? ["Active", "Deprecated", "Retracted"].filter((x) => x !== st).map(change) : null)));
    }
    clear(box).append(h("table", { id: "schemas" }, h("thead", {}, h("tr", {},
      h("th", { class: "num" }, "id"), h("th", {}, "name and version"), h("th", {}, "format"), h("th", {}, "state"),
      h("th", { class: "hide-narrow" }, "by"), h("th", { class: "hide-narrow" }, "created"), h("th", {}, ctx.me.admin ? "change state" : ""))), body));
    if (!rows.length) box.append(h("p", { class: "muted" }, "No schemas."));
    clear(pagerBox).append(pager(() => load(null), rows.length === 25 ? () => load(rows[rows.length - 1].id) : null, rows.length + " shown"));
  }

  function versionsPanel() {
    const name = h("input", { name: "subject", required: true });
    const a = h("select", { name: "from", "aria-label": "Older version" });
    const b = h("select", { name: "to", "aria-label": "Newer version" });
    const res = h("div", { id: "schema-diff" });
    const list = h("ul", { class: "results", id: "schema-version-list" });
    return h("section", { class: "card" }, h("h2", {}, "Versions and diff"),
      h("form", { class: "inline", id: "schema-versions", onsubmit: async (ev) => {
        ev.preventDefault();
        let answer;
        try { answer = await call("tidings_get_schema_versions", [name.value.trim()]); } catch (e) { showError(res, e); return; }
        const versions = answer[0] || [];
        clear(list); clear(a); clear(b); clear(res);
        if (!versions.length) { res.append(h("p", { class: "muted" }, "No schema has that name.")); return; }
        for (const v of versions) {
          list.append(h("li", {}, "v" + v.version + " → schema " + v.id));
          a.append(h("option", { value: v.id }, "v" + v.version)); b.append(h("option", { value: v.id }, "v" + v.version));
        }
        a.selectedIndex = Math.max(0, versions.length - 2); b.selectedIndex = versions.length - 1;
      } }, field("Name", name), h("button", { type: "submit" }, "Versions")),
      list,
      h("form", { class: "inline", onsubmit: async (ev) => {
        ev.preventDefault();
        if (!a.value || !b.value) return;
        let pair;
        try { pair = await call("get_schema", [Number(a.value), Number(b.value)]); } catch (e) { showError(res, e); return; }
        clear(res).append(diffView(pretty(pair[0].model), pretty(pair[1].model)));
      } }, field("From", a), field("To", b), h("button", { type: "submit" }, "Diff")),
      res);
  }

  function checkPanel() {
    const name = h("input", { name: "subject", required: true });
    const format = formatSelect();
    const model = h("textarea", { name: "model", required: true, placeholder: '{"type": "object"}' });
    const res = h("div", { id: "compatibility" });
    return h("section", { class: "card" }, h("h2", {}, "Compatibility check"),
      h("form", { onsubmit: async (ev) => {
        ev.preventDefault();
        let issues;
        try { issues = await call("tidings_check_schema_compatibility", { name: name.value.trim(), model: model.value, format: format.value }); }
        catch (e) { showError(res, e); return; }
        clear(res);
        if (!issues.length) res.append(h("p", { class: "ok" }, "Compatible: it would be accepted as the next version."));
        else res.append(h("ul", { class: "results" }, issues.map((i) =>
          h("li", { class: "error" }, i.path + " (" + i.rule + (i.version === null || i.version === undefined ? "" : ", v" + i.version) + "): " + i.message))));
      } }, h("div", { class: "inline" }, field("Name", name), field("Format", format)), field("Model", model),
      h("button", { type: "submit" }, "Check")), res);
  }

  function registerPanel() {
    const name = h("input", { name: "subject" });
    const format = formatSelect();
    const model = h("textarea", { name: "model", required: true });
    const res = h("div");
    return h("section", { class: "card" }, h("h2", {}, "Register a schema"),
      h("form", { onsubmit: async (ev) => {
        ev.preventDefault();
        const reg = { model: model.value, format: format.value };
        if (name.value.trim()) reg.name = name.value.trim();
        try { itemResults(res, [reg.name || "schema"], await call("register_schema", [reg])); load(null); } catch (e) { showError(res, e); }
      } }, h("div", { class: "inline" }, field("Name", name), field("Format", format)), field("Model", model),
      h("button", { type: "submit" }, "Register")), res);
  }

  load(null);
  return null;
}

function formatSelect() {
  return h("select", { name: "format" }, h("option", { value: "JSON" }, "JSON Schema"), h("option", { value: "AVRO" }, "Avro"));
}

function pretty(model) {
  try { return JSON.stringify(JSON.parse(model), null, 2); } catch (e) { return model; }
}

// A line diff (longest common subsequence); models are small, so quadratic is fine.
export function lineDiff(a, b) {
  const x = a.split("\n"), y = b.split("\n");
  const n = x.length, m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(["-", x[i++]]);
    else out.push(["+", y[j++]]);
  }
  while (i < n) out.push(["-", x[i++]]);
  while (j < m) out.push(["+", y[j++]]);
  return out;
}

function diffView(a, b) {
  const lines = lineDiff(a, b);
  const cls = { " ": "same", "-": "del", "+": "add" };
  return h("pre", { class: "diff", "aria-label": "Differences" },
    lines.map(([op, text]) => h("span", { class: cls[op] }, op + " " + text)));
}
