// The console's shell: sign-in, navigation by location hash, one view at a time.
import { call, setToken, token } from "./api.js";
import { clear, h } from "./dom.js";
import { publicationsView, subscriptionsView } from "./registry.js";
import { deadLettersView, replaysView, tailView } from "./operations.js";
import { schemasView } from "./schemas.js";
import { broadcastersView, principalsView } from "./admin.js";

const VIEWS = {
  "subscriptions": subscriptionsView,
  "publications": publicationsView,
  "tail": tailView,
  "dead-letters": deadLettersView,
  "replays": replaysView,
  "schemas": schemasView,
  "principals": principalsView,
  "broadcasters": broadcastersView,
};

const state = { me: null, cleanup: null };

function $(id) { return document.getElementById(id); }

function showSignIn(message) {
  state.me = null;
  if (state.cleanup) { state.cleanup(); state.cleanup = null; }
  clear($("view"));
  $("signin").hidden = false; $("nav").hidden = true; $("signout").hidden = true;
  $("who").textContent = "";
  $("signin-error").textContent = message || "";
  $("token").focus();
}

async function signIn(t) {
  setToken(t);
  try {
    state.me = await call("tidings_whoami");
  } catch (e) {
    setToken(null);
    showSignIn(e.status === 401 ? "That token is unknown or revoked." : e.message);
    return;
  }
  $("signin").hidden = true; $("nav").hidden = false; $("signout").hidden = false;
  $("who").textContent = state.me.name + (state.me.admin ? " (admin)" : "");
  for (const a of document.querySelectorAll("#nav a[data-admin]")) a.hidden = !state.me.admin;
  route();
}

function route() {
  if (!state.me) return;
  const [name, ...rest] = (location.hash.replace(/^#\/?/, "") || "subscriptions").split("/");
  const view = VIEWS[name] || subscriptionsView;
  if (state.cleanup) { state.cleanup(); state.cleanup = null; }
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.getAttribute("href") === "#/" + name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const root = clear($("view"));
  state.cleanup = view(root, { me: state.me, args: rest.map(decodeURIComponent) }) || null;
  const heading = root.querySelector("h1");
  if (heading) { heading.tabIndex = -1; heading.focus(); }
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    $("token").value = "";
    if (t) signIn(t);
  });
  $("signout").addEventListener("click", () => { setToken(null); showSignIn("Signed out."); });
  window.addEventListener("hashchange", route);
  window.addEventListener("tidings:unauthenticated", () => { setToken(null); showSignIn("Your token is no longer valid; sign in again."); });
  if (token()) signIn(token()); else showSignIn("");
});
