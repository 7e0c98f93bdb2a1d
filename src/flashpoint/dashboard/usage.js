// The usage section: workers' device time over the last 24 hours (GET /v1/usage, decision 0112), grouped by the
// chosen app, environment, endpoint, key or model: GPU-hours busy, idle and starting, vCPU-hours and memory GB-hours.
// Every text goes in as text (dom.js).

import { $, el, replace, table } from "./dom.js";
import { state } from "./state.js";

// the read: the last 24 hours, grouped as chosen, within the app/env filter
export function usagePath() {
  const query = new URLSearchParams({ since: "24h", by: state.usageBy || "app" });
  if (state.app) query.set("app", state.app);
  if (state.env) query.set("env", state.env);
  return "/v1/usage?" + query.toString();
}

function hours(seconds) {
  return (seconds / 3600).toFixed(seconds && seconds < 36 ? 4 : 2);
}

const NONE = { app: "(no app)", env: "(no environment)", key: "(no key)", endpoint: "(none)", model: "(none)" };

export function drawUsage(usage) {
  const rows = (usage.usage || []).map((row) =>
    el(
      "tr",
      null,
      el("td", { cls: row.name ? "mono" : "note", text: row.name || NONE[usage.by] || "(none)" }),
      el("td", { text: hours(row.busy.gpuSeconds) }),
      el("td", { text: hours(row.idle.gpuSeconds) }),
      el("td", { text: hours(row.starting.gpuSeconds) }),
      el("td", { text: hours(row.gpuSeconds) }),
      el("td", { text: hours(row.vcpuSeconds) }),
      el("td", { text: hours(row.memoryMbSeconds / 1024) }),
    ),
  );
  replace(
    $("usage-body"),
    rows.length
      ? table(
          ["", "GPU-h busy", "GPU-h idle", "GPU-h starting", "GPU-h", "vCPU-h", "memory GB-h"],
          rows,
        )
      : el("p", { cls: "empty", text: "No worker has held a device in the last 24 hours." }),
  );
}
