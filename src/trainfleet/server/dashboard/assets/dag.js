// A run's steps as a graph: each step a box coloured by its state, an arrow from each step
// it needs, laid out in columns by depth (a step's column is one after its deepest need).

import { h, shown, svg } from "./dom.js";

const WIDTH = 210; // px, a box; as in style.css .dag-step
const HEIGHT = 78;
const GAP_X = 64;
const GAP_Y = 18;

// Each step's needs, as the server's `graph` says (null where it says nothing). Steps the
// run has but the graph lacks need nothing; needs of steps the run lacks are dropped.
export function graphOf(details) {
  const needs = details.graph;
  if (!needs) return null;
  const known = new Set(details.steps.map((step) => step.step));
  const graph = new Map();
  for (const [name, wanted] of Object.entries(needs)) {
    if (known.has(name)) graph.set(name, (Array.isArray(wanted) ? wanted : []).map(String).filter((n) => known.has(n)));
  }
  for (const name of known) if (!graph.has(name)) graph.set(name, []);
  return graph;
}

// Columns of step names: a step's column is one past its deepest need (a need met again on
// the way, as in a cycle, counts as none). Within a column, steps sit near the steps they
// need (the mean of their rows), ties in the graph's order.
export function layers(graph) {
  const depth = new Map();
  const visiting = new Set();
  const depthOf = (name) => {
    if (depth.has(name)) return depth.get(name);
    if (visiting.has(name)) return 0;
    visiting.add(name);
    const found = Math.max(-1, ...graph.get(name).map(depthOf)) + 1;
    visiting.delete(name);
    depth.set(name, found);
    return found;
  };
  const columns = [];
  for (const name of graph.keys()) (columns[depthOf(name)] ||= []).push(name);
  const row = new Map();
  for (const column of columns) {
    const placed = column.map((name, i) => {
      const rows = graph.get(name).map((need) => row.get(need));
      return { name, at: rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : i };
    });
    placed.sort((a, b) => a.at - b.at);
    placed.forEach(({ name }, i) => row.set(name, i));
    column.splice(0, column.length, ...placed.map(({ name }) => name));
  }
  return columns;
}

// The graph drawn: boxes (HTML, so their names link to their jobs) over the arrows (SVG).
// `graph` null: the steps in one column, with no arrows.
export function dagView(graph, steps) {
  const byName = new Map(steps.map((step) => [step.step, step]));
  const columns = graph ? layers(graph) : [steps.map((step) => step.step)];
  const where = new Map();
  columns.forEach((column, x) => column.forEach((name, y) => where.set(name, { x: x * (WIDTH + GAP_X), y: y * (HEIGHT + GAP_Y) })));
  const width = Math.max(1, columns.length * (WIDTH + GAP_X) - GAP_X);
  const height = Math.max(1, ...columns.map((column) => column.length * (HEIGHT + GAP_Y) - GAP_Y));

  const arrows = svg(
    "svg",
    { class: "dag-edges", width, height, viewBox: `0 0 ${width} ${height}`, "aria-hidden": "true" },
    svg("defs", {}, svg("marker", { id: "dag-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z" }))),
  );
  for (const [name, needs] of graph || []) {
    const to = where.get(name);
    for (const need of needs) {
      const from = where.get(need);
      const [x1, y1, x2, y2] = [from.x + WIDTH, from.y + HEIGHT / 2, to.x, to.y + HEIGHT / 2];
      const bend = Math.max(24, (x2 - x1) / 2);
      const state = byName.get(need)?.state || "";
      arrows.append(
        svg("path", {
          class: `dag-edge ${state}`,
          "data-from": need,
          "data-to": name,
          d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`,
          "marker-end": "url(#dag-arrow)",
        }),
      );
    }
  }
  const area = h("div", { class: "dag", role: "group", "aria-label": "steps" }, arrows);
  area.style.width = `${width}px`; // through the CSSOM: the page's policy allows no inline style
  area.style.height = `${height}px`;
  for (const [name, at] of where) {
    const box = stepBox(byName.get(name), graph?.get(name) || []);
    box.style.left = `${at.x}px`;
    box.style.top = `${at.y}px`;
    area.append(box);
  }
  return h("div", { class: "dag-scroll" }, area);
}

function stepBox(step, needs) {
  const job = step.jobs.at(-1);
  const name = job ? h("a", { class: "name", href: `#/jobs/${encodeURIComponent(job)}`, title: `${step.step}: its job ${job}` }, step.step) : h("span", { class: "name", title: step.step }, step.step);
  const reason = shown(step.reason || "", 300);
  return h(
    "div",
    { class: `dag-step ${step.state}`, "data-step": step.step, "data-state": step.state, "data-job": job, "data-needs": needs.join(" ") },
    h("div", { class: "head" }, name, h("span", { class: "badge" }, step.state)),
    h("div", { class: "tries" }, step.tries ? `${step.tries} ${step.tries === 1 ? "try" : "tries"}` : "not tried", job ? ` · ${job}` : ""),
    h("div", { class: "why", title: reason }, reason),
  );
}
