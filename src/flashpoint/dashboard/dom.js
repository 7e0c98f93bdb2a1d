// Text-only DOM helpers for the dashboard's views: elements built with createElement and filled with textContent or
// text nodes (never markup), and the formatting of times, durations and JSON values.

export const $ = (id) => document.getElementById(id);

export function el(tag, options, ...children) {
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

export function table(headings, rows) {
  return el("table", null, el("tr", null, headings.map((h) => el("th", { text: h }))), rows);
}

export function pill(text, cls) {
  return el("span", { cls: "pill " + (cls || ""), text });
}

export function fact(label, value) {
  return el("span", null, el("b", { text: label + " " }), value);
}

export function replace(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

export function ms(value) {
  if (value === null || value === undefined) return "";
  return value < 1000 ? `${value} ms` : `${(value / 1000).toFixed(value < 10000 ? 2 : 1)} s`;
}

export function time(epochSeconds) {
  if (!epochSeconds) return "";
  const d = new Date(epochSeconds * 1000);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

export function json(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch (e) {
    return String(value);
  }
}
