// The console's only way to the server: the API's methods (POST /v1/<name>) and the
// console's read routes, always with the signed-in principal's bearer token. No cookies.
const KEY = "tidings.token";

export function token() { return sessionStorage.getItem(KEY); }
export function setToken(t) { if (t) sessionStorage.setItem(KEY, t); else sessionStorage.removeItem(KEY); }

export class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

function headers() { return { "Authorization": "Bearer " + token() }; }

async function answer(resp) {
  const text = await resp.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  if (!resp.ok) {
    const err = body && body.error ? body.error : { code: "http_" + resp.status, message: text.slice(0, 200) };
    if (resp.status === 401) window.dispatchEvent(new CustomEvent("tidings:unauthenticated"));
    throw new ApiError(resp.status, err.code, err.message);
  }
  return body;
}

// An API method, exactly as the SDK calls it.
export async function call(method, arg) {
  const init = { method: "POST", headers: { ...headers(), "Content-Type": "application/json" } };
  if (arg !== undefined) init.body = JSON.stringify(arg);
  return answer(await fetch("/v1/" + encodeURIComponent(method), init));
}

// A console read route: GET /console/api/<path>?params.
export async function get(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const qs = q.toString();
  return answer(await fetch("/console/api/" + path + (qs ? "?" + qs : ""), { headers: headers() }));
}

// A server-sent-event feed read with fetch (EventSource cannot send the Authorization
// header). Calls onEvent(name, data) per event; reconnects after the server ends a feed,
// until the returned stop() is called. onError(err) is told of refusals (and stops).
export function stream(path, params, onEvent, onError) {
  let stopped = false;
  let controller = null;
  async function run() {
    while (!stopped) {
      // params may be a function: asked again at each (re)connection (the tail resumes).
      const q = new URLSearchParams(typeof params === "function" ? params() : params).toString();
      controller = new AbortController();
      try {
        const resp = await fetch("/console/api/" + path + "?" + q, { headers: headers(), signal: controller.signal });
        if (!resp.ok) { await answer(resp); return; }
        const reader = resp.body.getReader();
        const decoder = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
            let name = "message", data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event: ")) name = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
            }
            if (!data) continue;
            const parsed = JSON.parse(data);
            if (name === "end") { stopped = true; if (onError) onError(new ApiError(403, "ended", parsed.reason)); return; }
            onEvent(name, parsed);
          }
        }
      } catch (e) {
        if (stopped) return;
        if (e instanceof ApiError) { stopped = true; if (onError) onError(e); return; }
      }
      if (!stopped) await new Promise((r) => setTimeout(r, 1000));
    }
  }
  run();
  return () => { stopped = true; if (controller) controller.abort(); };
}

// Plain JSON to the ICRC-16 wire form, as the SDK's from_python does.
export function icrc16(x) {
  if (x === null || x === undefined) return { Option: null };
  if (typeof x === "boolean") return { Bool: x };
  if (typeof x === "number") {
    if (Number.isInteger(x)) return x >= 0 ? { Nat: x } : { Int: x };
    return { Float: x };
  }
  if (typeof x === "string") return { Text: x };
  if (Array.isArray(x)) return { Array: x.map(icrc16) };
  return { Map: Object.entries(x).map(([k, v]) => [k, icrc16(v)]) };
}
