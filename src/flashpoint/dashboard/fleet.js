// The fleet and endpoints sections: each node with its devices (the simulated mark, who holds each) and CPU
// reservations; each endpoint with its workers, queue, scaler and why it waits per GPU candidate. Also the endpoint
// link and the reasons table the jobs section (jobs.js) reuses. Every text goes in as text (dom.js).

import { $, el, fact, pill, replace, table } from "./dom.js";
import { actions, appChoice, appEnvText, inChosenApp, state } from "./state.js";

// the fleet: nodes and their devices, the simulated mark, who holds each

export function drawFleet(fleet) {
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
        el("td", { cls: "telemetry", text: telemetryText(d.telemetry) }),
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
          ? table(["#", "Model", "VRAM", "Pool", "Mark", "Held by", "Telemetry"], rows)
          : el("p", { cls: "empty", text: "no GPUs (CPU endpoints run here)" }),
        reservations,
      ),
    );
  }
  replace($("fleet-body"), cards.length ? el("div", { cls: "cards" }, cards) : el("p", { cls: "empty", text: "no nodes" }));
}

// a device's GPU telemetry in words: its latest NVML sample, or why there is none ("simulated: no telemetry",
// "unknown: ..."); a figure the device does not report is left out, never drawn as 0
export function telemetryText(t) {
  if (!t) return "";
  if (t.status !== "sampled") return t.detail || t.status;
  const parts = [];
  if (t.utilizationPct != null) parts.push(`${t.utilizationPct}% util`);
  if (t.memoryUsedMb != null && t.memoryTotalMb != null) parts.push(`${t.memoryUsedMb} / ${t.memoryTotalMb} MiB`);
  if (t.temperatureC != null) parts.push(`${t.temperatureC} °C`);
  if (t.powerW != null) parts.push(`${Math.round(t.powerW)} W`);
  const procs = t.processes || [];
  if (procs.length) parts.push(`${procs.length} process${procs.length > 1 ? "es" : ""}`);
  return parts.join(", ");
}

export function endpointLink(name) {
  return el("button", {
    cls: "linkish",
    type: "button",
    text: name,
    title: "show this endpoint's jobs",
    onclick: () => actions.showEndpoint(name),
  });
}

// ---------------------------------------------------------------------------------------------------------------
// endpoints: workers by state, queue depth, scaler, why it waits (per GPU candidate)

export function drawEndpoints(body) {
  const every = body.endpoints || [];
  drawAppChoices(every);
  const endpoints = every.filter(inChosenApp);
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
    const said = every.length ? "no endpoints of this app and environment" : "no endpoints registered yet";
    replace($("endpoints-body"), el("p", { cls: "empty", text: said }));
    return;
  }
  replace(
    $("endpoints-body"),
    el("div", { cls: "cards" }, endpoints.map(drawEndpoint)),
  );
}

// the app/env select, built from the endpoints' apps and environments: every app, then each of its environments (the
// chosen one is kept while no endpoint of it is registered)
function drawAppChoices(endpoints) {
  const envs = new Map();
  for (const ep of endpoints) {
    if (!ep.app) continue;
    if (!envs.has(ep.app)) envs.set(ep.app, new Set());
    envs.get(ep.app).add(ep.env);
  }
  const wanted = [""];
  for (const app of [...envs.keys()].sort()) {
    wanted.push(app, ...[...envs.get(app)].sort().map((env) => appChoice(app, env)));
  }
  const chosen = appChoice(state.app, state.env);
  if (chosen && !wanted.includes(chosen)) wanted.push(chosen);
  const select = $("filter-app");
  if ([...select.options].map((o) => o.value).join("\n") === wanted.join("\n")) return;
  const label = (choice) => (!choice ? "all" : choice.includes("/") ? choice : `${choice} (every environment)`);
  replace(select, wanted.map((choice) => el("option", { text: label(choice) })));
  [...select.options].forEach((o, i) => (o.value = wanted[i]));
  select.value = chosen;
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
      el("td", { cls: "mono", text: phasesText(w.phases) }),
    ),
  );
  return el(
    "div",
    { cls: "card endpoint" + (ex.never ? " never" : ""), data: { endpoint: ep.name } },
    el("h3", null, endpointLink(ep.name), " ", pill(ep.kind || "function"), ex.never ? [" ", pill("can never run here", "never")] : null),
    el("div", { cls: "facts" }, ep.app ? fact("app/env", appEnvText(ep)) : null, fact("on", what)),
    ep.schedule ? el("div", { cls: "facts" }, fact("schedule", scheduleText(ep.schedule))) : null,
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
    workers.length ? table(["Worker", "State", "Placement", "Jobs", "Cold start"], workers) : null,
  );
}

export function reasonsTable(reasons) {
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

// a cron schedule (decision 0109): its expression, read in UTC, and its next fire time (null where the plane runs none)
export function scheduleText(schedule) {
  const cron = `${schedule.cron} (UTC)`;
  if (!schedule.active) return `${cron} · not run by this plane (flashpoint serve runs schedules)`;
  return schedule.next ? `${cron} · next ${schedule.next.replace("T", " ").replace(/:00Z$/, " UTC")}` : cron;
}

// a worker's cold start by phase (decision 0118), in the order the plane sends them: "0.4 s process · 1.0 s imports"
export function phasesText(phases) {
  const words = { first_job: "to first job" };
  return Object.entries(phases || {})
    .filter(([, s]) => typeof s === "number" && Number.isFinite(s))
    .map(([name, s]) => `${s < 10 ? s.toFixed(1) : s.toFixed(0)} s ${words[name] || name}`)
    .join(" · ");
}

function placementText(p) {
  if (!p) return "";
  const parts = [p.node];
  if (p.gpuModel) parts.push(`${p.gpuModel} #${(p.deviceIds || []).join(", #")}`);
  if (p.cpuInstance) parts.push(`${p.cpuInstance} cores ${(p.cores || []).join(", ")}`);
  if (p.gpuModel) parts.push(p.simulated ? "simulated" : "real");
  return parts.join(" · ");
}

