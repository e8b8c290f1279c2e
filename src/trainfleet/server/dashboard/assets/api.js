// The server's API as the page uses it: its session cookie, the session's CSRF token on
// every change, and the server's own messages for every refusal.

const PREFIX = "/api/v1";
let csrf = null;
const signedOutHandlers = [];

export class Problem extends Error {
  constructor(status, detail, problems = []) {
    super(detail);
    this.status = status;
    this.problems = problems;
  }
}

export function onSignedOut(handler) {
  signedOutHandlers.push(handler);
}

export async function api(path, { method = "GET", body, type, headers: extra = {}, raw = false } = {}) {
  const headers = { ...extra };
  if (body !== undefined && type === undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(body);
  } else if (type !== undefined) {
    headers["Content-Type"] = type;
  }
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  let response;
  try {
    response = await fetch(PREFIX + path, { method, body, headers, credentials: "same-origin" });
  } catch (error) {
    throw new Problem(0, `the server cannot be reached (${error.message})`);
  }
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    let problems = [];
    try {
      const answer = await response.json();
      detail = answer.detail || detail;
      problems = answer.problems || [];
    } catch (_) {
      // not JSON: the status says it
    }
    if (response.status === 401 && path !== "/session") {
      csrf = null;
      signedOutHandlers.forEach((handler) => handler(detail));
    }
    throw new Problem(response.status, detail, problems);
  }
  if (raw) return response;
  return response.status === 204 ? null : response.json();
}

// A key that makes a submission sent again (its answer lost) store its job once: random,
// from getRandomValues, which pages served over plain HTTP have too (randomUUID needs HTTPS).
export function idempotencyKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

export async function session() {
  const view = await api("/session");
  csrf = view.csrf;
  return view;
}

export async function signIn(token) {
  const view = await api("/session", { method: "POST", body: { token } });
  csrf = view.csrf;
  return view;
}

export async function signOut() {
  try {
    await api("/session", { method: "DELETE" });
  } finally {
    csrf = null;
  }
}

export function path(...parts) {
  return parts.map((part) => encodeURIComponent(String(part))).join("/");
}
