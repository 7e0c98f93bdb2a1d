// The dashboard's reads of the native /v1 API: each sends the tab's key as "Authorization: Bearer KEY" (no cookie, no
// redirect, no cache) and hands back the answer's text; a 401 is an AuthError, any other failure an ApiError carrying
// the server's message.

import { JOBS_LIMIT, state } from "./state.js";

export class AuthError extends Error {}
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export async function api(path) {
  const headers = { Accept: "application/json" };
  if (state.key) headers.Authorization = "Bearer " + state.key;
  const response = await fetch(path, { headers, cache: "no-store", credentials: "omit", redirect: "error" });
  const text = await response.text();
  if (response.status === 401) throw new AuthError(messageOf(text) || "unauthorized");
  if (!response.ok) throw new ApiError(response.status, messageOf(text) || `HTTP ${response.status}`);
  return text;
}

function messageOf(text) {
  try {
    const body = JSON.parse(text);
    return typeof body.message === "string" ? body.message : typeof body.error === "string" ? body.error : "";
  } catch (e) {
    return text.slice(0, 200);
  }
}

// the jobs list's read: the newest JOBS_LIMIT jobs, filtered by the chosen endpoint, status, app and environment
// (the server filters by app before the limit)
export function jobsPath() {
  const query = new URLSearchParams({ limit: String(JOBS_LIMIT) });
  if (state.endpoint) query.set("endpoint", state.endpoint);
  if (state.status) query.set("status", state.status);
  if (state.app) query.set("app", state.app);
  if (state.env) query.set("env", state.env);
  return "/v1/jobs?" + query.toString();
}
