// The REST API as the dashboard calls it: the key from sessionStorage as a bearer
// token, the admin's chosen user in X-Ledgermem-User, and the API's JSON errors
// raised as ApiError with the server's own message.

const KEY = "ledgermem.key";
const USER = "ledgermem.user";
const ADMIN = "ledgermem.admin";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** Who is signed in, kept for this browser tab only (sessionStorage). */
export const auth = {
  get key() { return sessionStorage.getItem(KEY); },
  get admin() { return sessionStorage.getItem(ADMIN) === "1"; },
  get user() { return sessionStorage.getItem(USER); },
  signIn(key, admin, user) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(ADMIN, admin ? "1" : "0");
    if (user) sessionStorage.setItem(USER, user); else sessionStorage.removeItem(USER);
  },
  actFor(user) {
    if (user) sessionStorage.setItem(USER, user); else sessionStorage.removeItem(USER);
  },
  signOut() {
    for (const name of [KEY, USER, ADMIN]) sessionStorage.removeItem(name);
  },
};

function url(path, query) {
  const target = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value === undefined || value === null || value === "") continue;
    for (const each of Array.isArray(value) ? value : [value]) {
      target.searchParams.append(name, String(each));
    }
  }
  return target;
}

/**
 * Call the API; returns the parsed JSON (null for 204). Throws ApiError.
 *
 * options: query (object), body (JSON), key (overrides the signed-in key),
 * asUser (false: no X-Ledgermem-User even for the admin).
 */
export async function call(method, path, { query, body, key, asUser = true } = {}) {
  const headers = { Accept: "application/json" };
  const token = key ?? auth.key;
  if (token) headers.Authorization = `Bearer ${token}`;
  if (asUser && auth.admin && auth.user && key === undefined) {
    headers["X-Ledgermem-User"] = auth.user;
  }
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url(path, query), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new ApiError(0, "network", `the server did not answer (${error.message})`);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const problem = data && typeof data === "object" ? data.error : null;
    throw new ApiError(response.status, problem?.code ?? `http_${response.status}`,
      problem?.message ?? (text.slice(0, 300) || response.statusText), problem?.details);
  }
  return data;
}

export const get = (path, query, options) => call("GET", path, { ...options, query });
export const post = (path, body, options) => call("POST", path, { ...options, body });
export const patch = (path, body) => call("PATCH", path, { body });
export const del = (path, query) => call("DELETE", path, { query });

/** The path of one item's route (ids are escaped for the URL). */
export const itemPath = (id, rest = "") => `/v1/memories/${encodeURIComponent(id)}${rest}`;
