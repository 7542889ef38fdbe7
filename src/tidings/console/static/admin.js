// Principals and tokens (admins), and the broadcasters with what they are assigned.
import { call, get } from "./api.js";
import { clear, field, h, pager, showError, time } from "./dom.js";

export function principalsView(root, ctx) {
  if (!ctx.me.admin) {
    root.append(h("h1", {}, "Principals"), h("p", { class: "error" }, "Only admins manage principals."));
    return null;
  }
  const q = h("input", { type: "search", name: "q", "aria-label": "Search principals" });
  const box = h("div", { class: "table-wrap" });
  const pagerBox = h("div");
  const out = h("div", { id: "principal-results" });
  root.append(
    h("h1", {}, "Principals and tokens"),
    h("form", { class: "inline", role: "search", onsubmit: (ev) => { ev.preventDefault(); load(null); } }, field("Search", q), h("button", { type: "submit" }, "Search")),
    out, box, pagerBox, createForm(), revokeOneForm());

  async function load(after) {
    let page;
    try { page = await get("principals", { q: q.value, after, take: 50 }); } catch (e) { showError(box, e); return; }
    const body = h("tbody");
    for (const p of page.items) {
      body.append(h("tr", { "data-name": p.name },
        h("td", {}, p.name), h("td", {}, p.admin ? "admin" : ""), h("td", { class: "hide-narrow" }, time(p.createdAt)),
        h("td", {}, h("button", { type: "button", class: "danger", onclick: async () => {
          if (!window.confirm("Revoke every token of " + p.name + "?")) return;
          try { const r = await call("tidings_revoke_tokens", { principal: p.name }); clear(out).append(h("p", { class: "ok" }, p.name + ": " + r.revoked + " token(s) revoked")); }
          catch (e) { showError(out, e); }
        } }, "Revoke all tokens"))));
    }
    clear(box).append(h("table", { id: "principals" }, h("thead", {}, h("tr", {}, h("th", {}, "name"), h("th", {}, "role"), h("th", { class: "hide-narrow" }, "created"), h("th", {}, ""))), body));
    clear(pagerBox).append(pager(() => load(null), page.next !== null ? () => load(page.next) : null, page.total + " principals"));
  }

  function createForm() {
    const name = h("input", { name: "name", required: true });
    const admin = h("input", { type: "checkbox", name: "admin" });
    const res = h("div", { id: "created-token" });
    return h("section", { class: "card" }, h("h2", {}, "Create a principal"),
      h("form", { class: "inline", onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          const r = await call("tidings_create_principal", { name: name.value.trim(), admin: admin.checked });
          clear(res).append(h("p", {}, "Token of " + r.name + " (shown once; copy it now):"), h("p", { class: "token", tabindex: 0 }, r.token));
          load(null);
        } catch (e) { showError(res, e); }
      } }, field("Name", name), h("label", {}, admin, " admin"), h("button", { type: "submit" }, "Create")), res);
  }

  function revokeOneForm() {
    const name = h("input", { name: "principal", required: true });
    const tok = h("input", { name: "token", type: "password", autocomplete: "off", required: true });
    const res = h("div", { id: "revoked-token" });
    return h("section", { class: "card" }, h("h2", {}, "Revoke one token"),
      h("p", { class: "muted" }, "A token that leaked: its principal keeps its other tokens."),
      h("form", { class: "inline", id: "revoke-one", onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          const r = await call("tidings_revoke_tokens", { principal: name.value.trim(), token: tok.value.trim() });
          tok.value = "";
          clear(res).append(h("p", { class: r.revoked ? "ok" : "error" }, name.value.trim() + ": " + r.revoked + " token(s) revoked"));
        } catch (e) { showError(res, e); }
      } }, field("Principal", name), field("Token", tok), h("button", { type: "submit" }, "Revoke")), res);
  }

  load(null);
  return null;
}

export function broadcastersView(root, ctx) {
  const box = h("div");
  root.append(h("h1", {}, "Broadcasters and assignments"), box);
  (async () => {
    let rows, pubs;
    try { rows = await call("icrc72_get_broadcasters", {}); pubs = await get("publications", { take: 100 }); } catch (e) { showError(box, e); return; }
    const stat = (b, key) => { const found = b.stats.find(([k]) => k === key); return found ? Object.values(found[1])[0] : 0; };
    const table = h("table", { id: "broadcasters" }, h("thead", {}, h("tr", {}, h("th", {}, "broadcaster"), h("th", {}, "statistics"), h("th", {}, "assigned publications"), h("th", {}, "subscriptions delivered"))),
      h("tbody", {}, rows.map((b) => h("tr", {},
        h("td", {}, b.broadcaster),
        h("td", {}, h("ul", { class: "results" }, b.stats.map(([k, v]) => h("li", {}, k + ": " + Object.values(v)[0])))),
        h("td", {}, rows.length === 1 ? "all " + pubs.total + " publications" : String(stat(b, "tidings:broadcaster:publications"))),
        h("td", {}, String(stat(b, "tidings:broadcaster:subscriptions")))))));
    clear(box).append(h("div", { class: "table-wrap" }, table),
      h("p", { class: "muted" }, rows.length === 1
        ? "This server runs one broadcaster; it serves every publication. Interchain distributors are configured in their own file (docs/interchain.md)."
        : rows.length + " broadcasters share one store; each delivers the subscriptions it holds the lease of (docs/scaling.md)."));
  })();
  return null;
}
