// Resource charts: each task's CPU and memory over time (its usage history: minute
// averages, then the last hour's samples), drawn as SVG lines, re-read every 5 s.

import { api, path } from "./api.js";
import { h, svg } from "./dom.js";

const WIDTH = 360;
const HEIGHT = 90;

function bytes(value) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 && unit ? 1 : 0)} ${units[unit]}`;
}

// One series as a line scaled to the box; its title is the newest value.
function chart(label, points, pick, shown) {
  const values = points.map(pick).filter((v) => v !== null && v !== undefined);
  const box = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: WIDTH, height: HEIGHT, role: "img", class: "chart" });
  const newest = values.length ? shown(values[values.length - 1]) : "no sample yet";
  box.append(svg("title", {}, `${label}: ${newest}`));
  if (values.length > 1) {
    const t0 = points[0].time;
    const span = Math.max(1, points[points.length - 1].time - t0);
    const top = Math.max(...values) || 1;
    const line = points
      .filter((p) => pick(p) !== null && pick(p) !== undefined)
      .map((p) => `${((p.time - t0) / span) * WIDTH},${HEIGHT - 4 - (pick(p) / top) * (HEIGHT - 8)}`)
      .join(" ");
    box.append(svg("polyline", { points: line, fill: "none", stroke: "#2f5bd3", "stroke-width": 1.5 }));
    box.append(svg("text", { x: 4, y: 12, "font-size": 10, fill: "#667085" }, `max ${shown(top)}`));
  }
  return h("figure", {}, box, h("figcaption", {}, `${label}: ${newest}`));
}

export class UsageCharts {
  constructor(jobId) {
    this.url = `/jobs/${path(jobId)}/usage?history=true`;
    this.element = h("div", { class: "charts" });
    this.timer = null;
  }

  async start() {
    await this.draw();
    this.timer = setInterval(() => this.draw(), 5000);
  }

  async draw() {
    try {
      const usage = await api(this.url);
      const rows = usage.tasks.map((task) => {
        const points = task.history.length ? task.history : task.current ? [task.current] : [];
        const charts = [
          chart("CPU", points, (p) => p.cpu, (v) => `${v.toFixed(0)}% of a core`),
          chart("memory", points, (p) => p.rss, bytes),
        ];
        if (points.some((p) => p.gpu_util !== null && p.gpu_util !== undefined)) {
          charts.push(chart("GPU", points, (p) => p.gpu_util, (v) => `${v.toFixed(0)}%`));
          charts.push(chart("GPU memory", points, (p) => p.gpu_memory, bytes));
        }
        return h("div", { class: "task-usage", "data-task": `${task.role}/${task.index}` }, h("h3", {}, `${task.role}/${task.index}`), ...charts);
      });
      this.element.replaceChildren(...(rows.length ? rows : [h("p", { class: "note" }, "No samples yet.")]));
    } catch (error) {
      this.element.replaceChildren(h("p", { class: "error" }, error.message));
    }
  }

  close() {
    clearInterval(this.timer);
  }
}
