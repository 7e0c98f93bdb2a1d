// The jobs section: the list (filtered by endpoint and status, newest first) and one job's detail: its placement,
// timeline, why it waits, error, output and logs. Every text goes in as text (dom.js): outputs, errors and log lines
// are whatever a handler or a caller wrote.

import { AuthError } from "./api.js";
import { $, el, json, ms, pill, replace, table, time } from "./dom.js";
import { endpointLink, reasonsTable } from "./fleet.js";
import { actions, appEnvText, JOBS_LIMIT, state } from "./state.js";

export function drawJobs(body) {
  const jobs = body.jobs || [];
  $("jobs-count").textContent = `${jobs.length}${jobs.length >= JOBS_LIMIT ? "+" : ""} job(s), newest first`;
  if (!jobs.length) {
    replace($("jobs-body"), el("p", { cls: "empty", text: "no jobs match" }));
    return;
  }
  const ofApps = jobs.some((j) => j.app); // the app/env column only where some job is an app's
  const rows = jobs.map((j) =>
    el(
      "tr",
      {
        cls: "job" + (j.id === state.job ? " selected" : ""),
        data: { job: j.id, status: j.status },
        onclick: () => actions.selectJob(j.id),
      },
      el("td", { cls: "mono", text: j.id }),
      ofApps ? el("td", { text: appEnvText(j) }) : null,
      el("td", { text: j.endpoint }),
      el("td", null, pill(j.status, "s-" + j.status)),
      el("td", { text: j.reason || "" }),
      el("td", { text: time(j.createdAt) }),
      el("td", { cls: "mono", text: j.submittedBy || "—" }),
      el("td", { text: ms(j.delayTime) }),
      el("td", { text: ms(j.executionTime) }),
    ),
  );
  replace($("jobs-body"), table(["Job", ...(ofApps ? ["App/env"] : []), "Endpoint", "Status", "Reason", "Submitted", "By", "Waited", "Ran"], rows));
}

// a job was picked (dashboard.js has put it in state and the fragment): mark its row, open the detail until it loads
export function showSelected(id) {
  for (const row of document.querySelectorAll("#jobs-body tr.job")) {
    row.classList.toggle("selected", row.dataset.job === id);
  }
  state.seen.detail = undefined;
  const detail = $("job-detail");
  detail.hidden = false;
  $("jobs-body").parentElement.classList.add("with-detail");
  replace(detail, el("p", { cls: "empty", text: "loading " + id }));
}

export function hideDetail() {
  state.job = "";
  $("job-detail").hidden = true;
  $("jobs-body").parentElement.classList.remove("with-detail");
  for (const row of document.querySelectorAll("#jobs-body tr.selected")) row.classList.remove("selected");
}

export function drawDetailAnswer(id, answer) {
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
      onclick: () => actions.closeDetail(),
    }),
  );
}

// a job's GPU figures while it ran (peak memory, mean utilisation), recorded when it ends; a simulated device has
// none, and a real one no sample saw says so rather than 0
function gpuUseText(job, p) {
  if (p.simulated) return "simulated: no telemetry";
  const parts = [];
  if (job.gpuMemoryPeakMb != null) parts.push(`peak ${job.gpuMemoryPeakMb} MiB`);
  if (job.gpuUtilizationMeanPct != null) parts.push(`mean ${job.gpuUtilizationMeanPct}% utilisation`);
  if (parts.length) return parts.join(", ");
  return job.status === "IN_PROGRESS" ? "recorded when it ends" : "not sampled";
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
      job.app ? [el("dt", { text: "app/env" }), el("dd", { text: appEnvText(job) })] : null,
      el("dt", { text: "submitted by" }), el("dd", { cls: "mono", text: job.submittedBy || "—" }),
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
          p.gpuModel ? [el("dt", { text: "GPU use" }), el("dd", { cls: "gpu-use", text: gpuUseText(job, p) })] : null,
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

