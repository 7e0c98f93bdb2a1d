// flashpoint's dashboard: reads the native /v1 API once a second and draws the fleet, the endpoints and the jobs.
// This module is the page's entry (index.html loads it as <script type="module">): the polling, the key form, the
// filters and selected job in the address's fragment, and the start. The sections are drawn by fleet.js and jobs.js
// with dom.js's helpers; api.js reads the API; state.js holds what they share.
//
// Rules every module keeps (tests/api/test_dashboard.py checks the first two in each):
// - Nothing from the API is ever inserted as HTML: every text goes through textContent (job outputs, errors and log
//   lines are whatever a handler or a caller wrote). No innerHTML, outerHTML, insertAdjacentHTML, document.write,
//   eval or new Function anywhere.
// - No inline script or style (the page's Content-Security-Policy forbids both), nothing fetched from elsewhere: the
//   modules import one another by relative path, from the server's own /static/dashboard/.
// - The API key is asked once, kept in this tab's sessionStorage and sent as "Authorization: Bearer KEY".

import { ApiError, AuthError, api, jobsPath } from "./api.js";
import { $, el, replace } from "./dom.js";
import { drawEndpoints, drawFleet } from "./fleet.js";
import { drawDetailAnswer, drawJobs, hideDetail, showSelected } from "./jobs.js";
import { KEY_STORAGE, actions, appChoice, appFilter, state } from "./state.js";
import { drawUsage, usagePath } from "./usage.js";

const POLL_MS = 1000;
const MAX_BACKOFF_MS = 8000;

// live updates: one round of reads a second (paused while the tab is hidden), each section drawn when it changed

function schedule(delay) {
  clearTimeout(state.timer);
  state.timer = setTimeout(tick, delay);
}

async function tick() {
  if (state.running) return;
  if (document.hidden) {
    $("live").textContent = "paused (tab hidden)";
    return; // visibilitychange starts it again
  }
  state.running = true;
  const generation = state.generation;
  const job = state.job;
  try {
    // the fleet is the admin's (a 403 for other keys, drawn as such); endpoints and jobs come filtered to the key
    const fleetRead = api("/v1/fleet").catch((e) => {
      if (e instanceof ApiError && e.status === 403) return e;
      throw e;
    });
    const reads = [fleetRead, api("/v1/endpoints"), api(jobsPath()), api(usagePath())];
    if (job) reads.push(api("/v1/jobs/" + encodeURIComponent(job)).catch((e) => e));
    const [fleet, endpoints, jobs, usage, detail] = await Promise.all(reads);
    if (generation !== state.generation) return; // the question changed while it was asked
    showMain();
    if (fleet instanceof ApiError) drawFleetRefused(fleet.message);
    else draw("fleet", fleet, drawFleet);
    draw("endpoints", endpoints, drawEndpoints);
    draw("jobs", jobs, drawJobs);
    draw("usage", usage, drawUsage);
    if (job) drawDetailAnswer(job, detail);
    state.failures = 0;
    setBanner("");
    const live = $("live");
    live.textContent = "live · updated " + new Date().toLocaleTimeString([], { hour12: false });
    live.classList.remove("stale");
  } catch (error) {
    if (generation !== state.generation) return;
    if (error instanceof AuthError) {
      askForKey(state.key ? "refused" : "needed");
      return; // no more reads until a key is given
    }
    state.failures += 1;
    const live = $("live");
    live.textContent = "not updating";
    live.classList.add("stale");
    setBanner(
      error instanceof ApiError
        ? `The server answered ${error.status}: ${error.message}`
        : `Cannot reach the server (${error.message || error}); trying again.`,
    );
  } finally {
    state.running = false;
    if (generation !== state.generation) schedule(0);
    else if (!state.waitingForKey) schedule(Math.min(POLL_MS * 2 ** state.failures, MAX_BACKOFF_MS));
  }
}

function refreshNow() {
  state.generation += 1;
  state.seen = {};
  if (!state.running) schedule(0);
}

function draw(section, text, drawer) {
  if (state.seen[section] === text) return;
  state.seen[section] = text;
  drawer(JSON.parse(text));
}

// a key that may not read the fleet: the server's words (which name the scope needed) in its place
function drawFleetRefused(message) {
  if (state.seen.fleet === message) return;
  state.seen.fleet = message;
  $("fleet-summary").textContent = "";
  replace($("fleet-body"), el("p", { cls: "empty", text: message }));
}

function setBanner(text) {
  const banner = $("banner");
  banner.textContent = text;
  banner.hidden = !text;
}

// ---------------------------------------------------------------------------------------------------------------
// the key

function askForKey(why) {
  state.keyNeeded = true;
  state.waitingForKey = true;
  clearTimeout(state.timer);
  $("main").hidden = true;
  $("forget-key").hidden = true;
  $("key-form").hidden = false;
  const message = $("key-message");
  if (why === "refused") {
    message.textContent =
      "The server refused that key (401 unauthorized). Check it and try again: a served app's key is its " +
      "FLASHPOINT_API_KEY or --api-key; a script's embedded server writes its key in the file its start line names.";
    message.className = "refused";
  } else {
    message.textContent = "This server needs its API key.";
    message.className = "";
  }
  $("live").textContent = "waiting for the key";
  setBanner("");
  $("key-input").focus();
}

function showMain() {
  $("key-form").hidden = true;
  $("main").hidden = false;
  $("forget-key").hidden = !state.keyNeeded;
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $("key-input");
  state.key = input.value.trim();
  input.value = "";
  if (state.key) sessionStorage.setItem(KEY_STORAGE, state.key);
  $("key-message").textContent = "Checking the key…";
  $("key-message").className = "";
  state.waitingForKey = false;
  refreshNow();
});

$("forget-key").addEventListener("click", () => {
  sessionStorage.removeItem(KEY_STORAGE);
  state.key = "";
  state.generation += 1;
  askForKey("needed");
});

// ---------------------------------------------------------------------------------------------------------------
// filters and the selected job live in the address's fragment (#endpoint=...&status=...&app=...&env=...&job=...)

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  state.endpoint = params.get("endpoint") || "";
  state.status = params.get("status") || "";
  state.app = params.get("app") || "";
  state.env = params.get("env") || "";
  state.job = params.get("job") || "";
  ensureOption($("filter-endpoint"), state.endpoint);
  $("filter-endpoint").value = state.endpoint;
  $("filter-status").value = state.status;
  ensureOption($("filter-app"), appChoice(state.app, state.env));
  $("filter-app").value = appChoice(state.app, state.env);
}

function writeHash() {
  const params = new URLSearchParams();
  if (state.endpoint) params.set("endpoint", state.endpoint);
  if (state.status) params.set("status", state.status);
  if (state.app) params.set("app", state.app);
  if (state.env) params.set("env", state.env);
  if (state.job) params.set("job", state.job);
  const hash = params.toString();
  history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
}

function setFilters(changes) {
  Object.assign(state, changes);
  writeHash();
  readHash();
  if (!state.job) hideDetail();
  refreshNow();
}

function ensureOption(select, value) {
  if (!value) return;
  if (![...select.options].some((o) => o.value === value)) select.append(el("option", { text: value }));
}

$("filter-endpoint").addEventListener("change", (e) => setFilters({ endpoint: e.target.value }));
$("filter-status").addEventListener("change", (e) => setFilters({ status: e.target.value }));
$("filter-app").addEventListener("change", (e) => setFilters(appFilter(e.target.value)));
$("usage-by").addEventListener("change", (e) => {
  state.usageBy = e.target.value;
  refreshNow();
});
window.addEventListener("hashchange", () => {
  readHash();
  if (!state.job) hideDetail();
  refreshNow();
});
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && !state.waitingForKey) schedule(0);
});

// ---------------------------------------------------------------------------------------------------------------
// the selected job: in state and the fragment here, on the page in jobs.js

function selectJob(id) {
  state.job = id;
  writeHash();
  showSelected(id);
  refreshNow();
}

Object.assign(actions, {
  showEndpoint: (name) => setFilters({ endpoint: name }),
  selectJob,
  closeDetail: () => {
    hideDetail();
    writeHash();
  },
});

// ---------------------------------------------------------------------------------------------------------------
// start

readHash();
if (state.job) selectJob(state.job);
schedule(0);
