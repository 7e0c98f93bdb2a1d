// The dashboard's one state object: the key, the filters and the selected job, and what polling keeps between rounds.
// Shared by the other modules (plain data, read and written in place); nothing here touches the page.

// where this tab keeps the API key (sessionStorage: closing the tab forgets it)
export const KEY_STORAGE = "flashpoint.apiKey";
// the most jobs one read asks for (the list says "200+" when it got that many)
export const JOBS_LIMIT = 200;

export const state = {
  key: sessionStorage.getItem(KEY_STORAGE) || "",
  keyNeeded: false, // the server answered 401 once: it has keys
  waitingForKey: false, // the key form is up: no reads until it is answered
  endpoint: "",
  status: "",
  app: "", // the app filter (its name), and the environment within it (or of every app when app is empty)
  env: "",
  job: "",
  usageBy: "app", // what the usage section groups by
  seen: {}, // the last body drawn per section: a section whose answer did not change is not drawn again
  timer: 0,
  generation: 0, // bumped when filters or the key change, so an answer to an older question is dropped
  failures: 0,
  running: false,
};

// what the views' links, rows and buttons do, filled in once by dashboard.js (which owns the fragment and the polling),
// so the views need not import it back
export const actions = {
  showEndpoint: (name) => {}, // an endpoint's name was clicked: filter the jobs by it
  selectJob: (id) => {}, // a job's row was clicked: show its detail
  closeDetail: () => {}, // the detail's "close" was clicked
};

// the app/env select's value of a filter: "shop" (every environment of shop), "shop/production", "" (every app); an
// environment of every app is "/production". App and environment names hold no "/" (the server refuses them).
export function appChoice(app, env) {
  if (!app && !env) return "";
  return env ? `${app}/${env}` : app;
}

export function appFilter(choice) {
  const [app, env] = choice.includes("/") ? choice.split("/", 2) : [choice, ""];
  return { app, env };
}

// the app and environment of an endpoint or a job row (the API says them; null outside any app)
export function appEnvText(row) {
  return row.app ? `${row.app}/${row.env}` : "";
}

// whether a row (endpoint or job) passes the app/env filter: one outside any app passes no filter
export function inChosenApp(row) {
  return (!state.app || row.app === state.app) && (!state.env || row.env === state.env);
}
