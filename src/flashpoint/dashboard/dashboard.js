// flashpoint's dashboard: reads the native /v1 API once a second and draws the fleet, the endpoints and the jobs.
//
// Rules this file keeps (tests/api/test_dashboard.py checks the first two):
// - Nothing from the API is ever inserted as HTML: every text goes through textContent (job outputs, errors and log
//   lines are whatever a handler or a caller wrote). No innerHTML, outerHTML, insertAdjacentHTML, document.write,
//   eval or new Function anywhere.
// - No inline script or style (the page's Content-Security-Policy forbids both), nothing fetched from elsewhere.
// - The API key is asked once, kept in this tab's sessionStorage and sent as "Authorization: Bearer KEY".
"use strict";

(() => {
  const KEY_STORAGE = "flashpoint.apiKey";
  const POLL_MS = 1000;
  const MAX_BACKOFF_MS = 8000;
  const JOBS_LIMIT = 200;

  const $ = (id) => document.getElementById(id);

  const state = {
    key: sessionStorage.getItem(KEY_STORAGE) || "",
    keyNeeded: false, // the server answered 401 once: it has keys
    waitingForKey: false, // the key form is up: no reads until it is answered
    endpoint: "",
    status: "",
    job: "",
    seen: {}, // the last body drawn per section: a section whose answer did not change is not drawn again
    timer: 0,
    generation: 0, // bumped when filters or the key change, so an answer to an older question is dropped
    failures: 0,
    running: false,
  };

  class AuthError extends Error {}
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // DOM helpers: text only

  function el(tag, options, ...children) {
    const node = document.createElement(tag);
    const opts = options || {};
    if (opts.cls) node.className = opts.cls;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.title) node.title = String(opts.title);
    if (opts.data) for (const [k, v] of Object.entries(opts.data)) node.dataset[k] = String(v);
    if (opts.onclick) node.addEventListener("click", opts.onclick);
    if (opts.type) node.type = opts.type;
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function table(headings, rows) {
    return el("table", null, el("tr", null, headings.map((h) => el("th", { text: h }))), rows);
  }

  function pill(text, cls) {
    return el("span", { cls: "pill " + (cls || ""), text });
  }

  function fact(label, value) {
    return el("span", null, el("b", { text: label + " " }), value);
  }

  function replace(node, ...children) {
    node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  }

  function ms(value) {
    if (value === null || value === undefined) return "";
    return value < 1000 ? `${value} ms` : `${(value / 1000).toFixed(value < 10000 ? 2 : 1)} s`;
  }

  function time(epochSeconds) {
    if (!epochSeconds) return "";
    const d = new Date(epochSeconds * 1000);
    return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
  }

  function json(value) {
    if (typeof value === "string") return value;
    try {
      return JSON.stringify(value, null, 2);
    } catch (e) {
      return String(value);
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // the API

  async function api(path) {
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

  function jobsPath() {
    const query = new URLSearchParams({ limit: String(JOBS_LIMIT) });
    if (state.endpoint) query.set("endpoint", state.endpoint);
    if (state.status) query.set("status", state.status);
    return "/v1/jobs?" + query.toString();
  }

  // ---------------------------------------------------------------------------------------------------------------
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
      const reads = [api("/v1/fleet"), api("/v1/endpoints"), api(jobsPath())];
      if (job) reads.push(api("/v1/jobs/" + encodeURIComponent(job)).catch((e) => e));
      const [fleet, endpoints, jobs, detail] = await Promise.all(reads);
      if (generation !== state.generation) return; // the question changed while it was asked
      showMain();
      draw("fleet", fleet, drawFleet);
      draw("endpoints", endpoints, drawEndpoints);
      draw("jobs", jobs, drawJobs);
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
  // filters and the selected job live in the address's fragment (#endpoint=...&status=...&job=...)

  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    state.endpoint = params.get("endpoint") || "";
    state.status = params.get("status") || "";
    state.job = params.get("job") || "";
    ensureOption($("filter-endpoint"), state.endpoint);
    $("filter-endpoint").value = state.endpoint;
    $("filter-status").value = state.status;
  }

  function writeHash() {
    const params = new URLSearchParams();
    if (state.endpoint) params.set("endpoint", state.endpoint);
    if (state.status) params.set("status", state.status);
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
  window.addEventListener("hashchange", () => {
    readHash();
    if (!state.job) hideDetail();
    refreshNow();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && !state.waitingForKey) schedule(0);
  });

  // ---------------------------------------------------------------------------------------------------------------
  // the fleet: nodes and their devices, the simulated mark, who holds each

  function drawFleet(fleet) {
    $("fleet-summary").textContent = fleet.summary || "";
    const nodes = new Map();
    for (const node of fleet.nodes || []) nodes.set(node.name, { node, devices: [] });
    for (const device of fleet.devices || []) {
      if (!nodes.has(device.node)) nodes.set(device.node, { node: null, devices: [] });
      nodes.get(device.node).devices.push(device);
    }
    const cards = [];
    for (const [name, { node, devices }] of nodes) {
      const simulated = node ? node.simulated : devices.some((d) => d.simulated);
      const head = el("h3", null, name + " ", pill(simulated ? "simulated" : "real", simulated ? "simulated" : "real"));
      const facts = node
        ? el(
            "div",
            { cls: "facts" },
            fact("CPUs", `${node.freeCpus} free of ${node.cpus}`),
            fact("memory", `${node.freeMemoryGb} GB free of ${node.memoryGb} GB`),
            fact("CUDA", node.cuda || "unknown"),
            Object.keys(node.labels || {}).length
              ? fact("labels", Object.entries(node.labels).map(([k, v]) => `${k}=${v}`).join(", "))
              : null,
          )
        : null;
      const rows = devices.map((d) =>
        el(
          "tr",
          { cls: "device", data: { node: d.node, index: d.index } },
          el("td", { text: d.index }),
          el("td", { text: d.model, title: d.name !== d.model ? d.name : "" }),
          el("td", { text: d.vramGb ? `${d.vramGb} GB` : "" }),
          el("td", { text: d.pool || "" }),
          el(
            "td",
            null,
            pill(d.simulated ? "simulated" : "real", d.simulated ? "simulated" : "real"),
            d.recognised ? null : [" ", pill("unrecognised: GpuGroup.ANY only")],
            d.coarse ? [" ", pill("coarse type")] : null,
          ),
          el(
            "td",
            null,
            d.endpoint
              ? [pill("held", "held"), " ", endpointLink(d.endpoint), el("span", { cls: "note mono", text: " " + d.worker })]
              : pill("free", "free"),
          ),
        ),
      );
      const reservations = node && node.reservations && node.reservations.length
        ? el(
            "div",
            null,
            el("h4", { text: "CPU reservations" }),
            table(
              ["Endpoint", "Worker", "Cores", "Memory"],
              node.reservations.map((r) =>
                el(
                  "tr",
                  null,
                  el("td", null, endpointLink(r.endpoint)),
                  el("td", { cls: "mono", text: r.worker }),
                  el("td", { text: (r.cores || []).join(", ") }),
                  el("td", { text: `${r.memoryGb} GB` }),
                ),
              ),
            ),
          )
        : null;
      cards.push(
        el(
          "div",
          { cls: "card node", data: { node: name } },
          head,
          facts,
          devices.length
            ? table(["#", "Model", "VRAM", "Pool", "Mark", "Held by"], rows)
            : el("p", { cls: "empty", text: "no GPUs (CPU endpoints run here)" }),
          reservations,
        ),
      );
    }
    replace($("fleet-body"), cards.length ? el("div", { cls: "cards" }, cards) : el("p", { cls: "empty", text: "no nodes" }));
  }

  function endpointLink(name) {
    return el("button", {
      cls: "linkish",
      type: "button",
      text: name,
      title: "show this endpoint's jobs",
      onclick: () => setFilters({ endpoint: name }),
    });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // endpoints: workers by state, queue depth, scaler, why it waits (per GPU candidate)

  function drawEndpoints(body) {
    const endpoints = body.endpoints || [];
    const select = $("filter-endpoint");
    const wanted = ["", ...endpoints.map((e) => e.name)];
    if (state.endpoint && !wanted.includes(state.endpoint)) wanted.push(state.endpoint);
    const have = [...select.options].map((o) => o.value);
    if (have.join("\n") !== wanted.join("\n")) {
      replace(select, wanted.map((name) => el("option", { text: name || "all" })));
      [...select.options].forEach((o, i) => (o.value = wanted[i]));
      select.value = state.endpoint;
    }
    if (!endpoints.length) {
      replace($("endpoints-body"), el("p", { cls: "empty", text: "no endpoints registered yet" }));
      return;
    }
    replace(
      $("endpoints-body"),
      el("div", { cls: "cards" }, endpoints.map(drawEndpoint)),
    );
  }

  function drawEndpoint(ep) {
    const ex = ep.explanation || {};
    const counts = ex.workers || {};
    const what = ep.cpu ? "CPU " + ep.cpu.join(" > ") : `${ep.gpu}${ep.gpuCount > 1 ? ` (x${ep.gpuCount})` : ""}`;
    const workers = (ep.workers || []).map((w) =>
      el(
        "tr",
        { cls: "worker" },
        el("td", { cls: "mono", text: w.id }),
        el("td", null, pill(w.state, "w-" + w.state), w.retiring ? [" ", pill("retiring")] : null),
        el("td", { text: placementText(w.placement) }),
        el("td", { cls: "mono", text: (w.jobs || []).join(", ") || (w.address ? `serves ${w.address}` : "") }),
      ),
    );
    return el(
      "div",
      { cls: "card endpoint" + (ex.never ? " never" : ""), data: { endpoint: ep.name } },
      el("h3", null, endpointLink(ep.name), " ", pill(ep.kind || "function"), ex.never ? [" ", pill("can never run here", "never")] : null),
      el("div", { cls: "facts" }, fact("on", what)),
      el(
        "div",
        { cls: "facts" },
        fact("workers", ["starting", "idle", "running", "stopping"].map((s) => `${counts[s] || 0} ${s}`).join(" · ")),
        fact("min/max", `${ep.workersMin}/${ep.workersMax}`),
      ),
      el(
        "div",
        { cls: "facts" },
        fact(ep.kind === "routes" ? "held requests" : "queue", String(ep.queueDepth)),
        ep.kind === "routes" ? fact("in flight", String(ep.inFlight || 0)) : null,
        fact("scaler", `${ep.scalerType} ${ep.scalerValue}`),
        fact("done", Object.entries(ep.counters || {}).map(([k, v]) => `${v} ${k}`).join(", ")),
      ),
      el("p", { cls: "summary", text: ex.summary || "" }),
      reasonsTable(ex.reasons || []),
      (ex.notes || []).length ? el("ul", { cls: "note" }, ex.notes.map((n) => el("li", { text: n }))) : null,
      workers.length ? table(["Worker", "State", "Placement", "Jobs"], workers) : null,
    );
  }

  function reasonsTable(reasons) {
    if (!reasons.length) return null;
    return table(
      ["Candidate", "Why not now", "Detail"],
      reasons.map((r) =>
        el(
          "tr",
          { cls: "reason" },
          el("td", { text: r.candidate }),
          el("td", { cls: "reason-code", text: r.code }),
          el("td", null, r.detail, (r.holders || []).length ? el("span", { cls: "note", text: ` (held by ${r.holders.join(", ")})` }) : null),
        ),
      ),
    );
  }

  function placementText(p) {
    if (!p) return "";
    const parts = [p.node];
    if (p.gpuModel) parts.push(`${p.gpuModel} #${(p.deviceIds || []).join(", #")}`);
    if (p.cpuInstance) parts.push(`${p.cpuInstance} cores ${(p.cores || []).join(", ")}`);
    if (p.gpuModel) parts.push(p.simulated ? "simulated" : "real");
    return parts.join(" · ");
  }

  // ---------------------------------------------------------------------------------------------------------------
  // jobs: the list (filtered by endpoint and status), and one job's placement, timeline, logs, output or error

  function drawJobs(body) {
    const jobs = body.jobs || [];
    $("jobs-count").textContent = `${jobs.length}${jobs.length >= JOBS_LIMIT ? "+" : ""} job(s), newest first`;
    if (!jobs.length) {
      replace($("jobs-body"), el("p", { cls: "empty", text: "no jobs match" }));
      return;
    }
    const rows = jobs.map((j) =>
      el(
        "tr",
        { cls: "job" + (j.id === state.job ? " selected" : ""), data: { job: j.id, status: j.status }, onclick: () => selectJob(j.id) },
        el("td", { cls: "mono", text: j.id }),
        el("td", { text: j.endpoint }),
        el("td", null, pill(j.status, "s-" + j.status)),
        el("td", { text: j.reason || "" }),
        el("td", { text: time(j.createdAt) }),
        el("td", { text: ms(j.delayTime) }),
        el("td", { text: ms(j.executionTime) }),
      ),
    );
    replace($("jobs-body"), table(["Job", "Endpoint", "Status", "Reason", "Submitted", "Waited", "Ran"], rows));
  }

  function selectJob(id) {
    state.job = id;
    writeHash();
    for (const row of document.querySelectorAll("#jobs-body tr.job")) {
      row.classList.toggle("selected", row.dataset.job === id);
    }
    state.seen.detail = undefined;
    const detail = $("job-detail");
    detail.hidden = false;
    $("jobs-body").parentElement.classList.add("with-detail");
    replace(detail, el("p", { cls: "empty", text: "loading " + id }));
    refreshNow();
  }

  function hideDetail() {
    state.job = "";
    $("job-detail").hidden = true;
    $("jobs-body").parentElement.classList.remove("with-detail");
    for (const row of document.querySelectorAll("#jobs-body tr.selected")) row.classList.remove("selected");
  }

  function drawDetailAnswer(id, answer) {
    const detail = $("job-detail");
    detail.hidden = false;
    $("jobs-body").parentElement.classList.add("with-detail");
    if (answer instanceof Error) {
      if (answer instanceof AuthError) throw answer;
      state.seen.detail = undefined;
      replace(
        detail,
        detailHead(id),
        el("p", { cls: "empty", text: answer.status === 404 ? `no job ${id} (its TTL may have ended)` : answer.message }),
      );
      return;
    }
    if (state.seen.detail === answer) return;
    state.seen.detail = answer;
    drawDetail(JSON.parse(answer));
  }

  function detailHead(id, status) {
    return el(
      "div",
      { cls: "head" },
      el("h3", null, el("span", { cls: "mono", text: id }), " ", status ? pill(status, "s-" + status) : null),
      el("button", {
        cls: "linkish",
        type: "button",
        text: "close",
        onclick: () => {
          hideDetail();
          writeHash();
        },
      }),
    );
  }

  function drawDetail(job) {
    const ex = job.explanation || {};
    const p = job.placement;
    const started = job.delayTime !== null && job.delayTime !== undefined ? job.createdAt + job.delayTime / 1000 : null;
    const ended = started !== null && job.executionTime !== null && job.executionTime !== undefined
      ? started + job.executionTime / 1000
      : null;
    const timeline = [el("li", { text: `submitted ${time(job.createdAt)}` })];
    if (started !== null) timeline.push(el("li", { text: `started ${time(started)} (waited ${ms(job.delayTime)})` }));
    if (ended !== null) timeline.push(el("li", { text: `ended ${time(ended)} ${job.status} (ran ${ms(job.executionTime)})` }));
    else if (started === null && job.status !== "IN_QUEUE") timeline.push(el("li", { text: `ended ${job.status} before it started` }));
    const parts = [
      detailHead(job.id, job.status),
      el(
        "dl",
        null,
        el("dt", { text: "endpoint" }), el("dd", null, endpointLink(job.endpoint)),
        el("dt", { text: "reason" }), el("dd", { cls: "reason-code", text: job.reason || "—" }),
        el("dt", { text: "worker" }), el("dd", { cls: "mono", text: job.workerId || "—" }),
        el("dt", { text: "retries" }), el("dd", { text: String(job.retries) }),
        job.flash ? [el("dt", { text: "Flash app" }), el("dd", { text: `${job.flash.app || ""} ${job.flash.environment || ""}` })] : null,
      ),
      el("h4", { text: "Placement" }),
      p
        ? el(
            "dl",
            { cls: "placement" },
            el("dt", { text: "node" }), el("dd", { text: p.node }),
            p.gpuModel ? [el("dt", { text: "GPU" }), el("dd", { text: p.gpuModel })] : null,
            p.gpuModel ? [el("dt", { text: "devices" }), el("dd", { text: (p.deviceIds || []).join(", ") })] : null,
            p.cpuInstance ? [el("dt", { text: "CPU instance" }), el("dd", { text: p.cpuInstance })] : null,
            p.cpuInstance ? [el("dt", { text: "cores" }), el("dd", { text: (p.cores || []).join(", ") })] : null,
            p.gpuModel
              ? [el("dt", { text: "mark" }), el("dd", null, pill(p.simulated ? "simulated" : "real", p.simulated ? "simulated" : "real"))]
              : null,
          )
        : el("p", { cls: "empty", text: "not placed yet" }),
      el("h4", { text: "Timeline" }),
      el("ol", { cls: "timeline" }, timeline),
    ];
    if (job.status === "IN_QUEUE" || job.status === "IN_PROGRESS") {
      parts.push(
        el("h4", { text: job.status === "IN_QUEUE" ? "Why it waits" : "Now" }),
        el("p", { cls: "summary", text: ex.summary || "" }),
        ex.position ? el("p", { cls: "note", text: `place ${ex.position} of ${ex.queueDepth} in the queue` }) : null,
        reasonsTable(ex.reasons || []),
      );
    }
    if (job.error) {
      parts.push(
        el("h4", { text: "Error" }),
        el("p", { cls: "error" }, el("b", { text: job.error.type + ": " }), job.error.message),
        job.error.traceback ? el("pre", { cls: "traceback", text: job.error.traceback }) : null,
      );
    }
    if (job.status === "COMPLETED" || (job.output !== null && job.output !== undefined)) {
      parts.push(
        el("h4", { text: "Output" }),
        job.outputEncoding ? el("p", { cls: "note", text: `encoded: ${job.outputEncoding} (a Python object, shown as sent)` }) : null,
        el("pre", { cls: "output", text: json(job.output) }),
      );
    }
    parts.push(
      el("h4", { text: "Logs" }),
      (job.logs || []).length ? el("pre", { cls: "logs", text: job.logs.join("\n") }) : el("p", { cls: "empty", text: "no log lines" }),
    );
    replace($("job-detail"), parts);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // start

  readHash();
  if (state.job) selectJob(state.job);
  schedule(0);
})();
