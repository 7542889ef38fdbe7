// Small DOM helpers: elements are built with textContent only (never innerHTML), so
// nothing a principal stored can run as markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

export function status(text) {
  const el = document.getElementById("status");
  el.textContent = text;
  if (text) setTimeout(() => { if (el.textContent === text) el.textContent = ""; }, 4000);
}

export function json(v) { return JSON.stringify(v, null, 2); }

export function time(ns) {
  if (!ns) return "";
  return new Date(Number(ns) / 1e6).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// The itemised answer of a batch method, one line per item, shown where the action was.
export function itemResults(target, labels, results) {
  clear(target);
  const list = h("ul", { class: "results" });
  results.forEach((r, i) => {
    const label = labels[i] === undefined ? "item " + (i + 1) : labels[i];
    if (r === null || r === undefined) list.append(h("li", { class: "ok" }, label + ": ok"));
    else if ("Ok" in r) list.append(h("li", { class: "ok" }, label + ": ok " + (r.Ok === null ? "" : JSON.stringify(r.Ok))));
    else if ("Err" in r) {
      const [code, detail] = Object.entries(r.Err)[0];
      list.append(h("li", { class: "error" }, label + ": " + code + (detail === null ? "" : " — " + (typeof detail === "string" ? detail : JSON.stringify(detail)))));
    } else list.append(h("li", {}, label + ": " + JSON.stringify(r)));
  });
  target.append(list);
  return results;
}

export function showError(target, e) {
  clear(target);
  target.append(h("p", { class: "error", role: "alert" }, (e.code ? e.code + ": " : "") + e.message));
}

// A labelled form control for form.inline.
export function field(label, control) { return h("label", {}, label, control); }

// A pager: "First" and "Next" buttons around a page loader keyed by cursor.
export function pager(onFirst, onNext, info) {
  return h("div", { class: "pager" },
    h("button", { type: "button", class: "secondary", onclick: onFirst }, "First page"),
    h("button", { type: "button", class: "secondary", onclick: onNext || undefined, disabled: !onNext }, "Next page"),
    h("span", { class: "muted" }, info));
}
