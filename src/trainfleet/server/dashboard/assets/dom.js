// Elements built from data: every value lands as text or an attribute, never as markup.

export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

const CONTROL = /\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|[\x00-\x08\x0b-\x1f\x7f]/g;

// A log line as shown: terminal escapes and control characters out, and at most `limit`
// characters (a 10 MB line would freeze any page).
export function shown(line, limit = 4000) {
  const text = line.replace(CONTROL, "");
  if (text.length <= limit) return text;
  return `${text.slice(0, limit)} … (${text.length - limit} more characters: download the log)`;
}

export function when(seconds) {
  if (!seconds) return "";
  return new Date(seconds * 1000).toLocaleString();
}

export function took(start, end) {
  if (!start) return "";
  const seconds = Math.max(0, Math.round((end || Date.now() / 1000) - start));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  return `${Math.round(seconds / 3600)}h`;
}

export function clear(element, ...children) {
  element.replaceChildren(...children);
  return element;
}

const SVG = "http://www.w3.org/2000/svg";

// An SVG element: its attributes set as given (values are data, never markup).
export function svg(tag, attrs, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    element.setAttribute(name, String(value));
  }
  element.append(...children.flat().filter((child) => child !== undefined && child !== null && child !== false));
  return element;
}

export function failure(error) {
  return h("p", { class: "error", role: "alert" }, error.message || String(error));
}

export function stateBadge(state, code) {
  return h("span", { class: `state ${state}`, title: code || "" }, state);
}
