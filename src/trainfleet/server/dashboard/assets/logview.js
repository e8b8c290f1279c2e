// One task's log: its tail first, then followed live; only the rows in sight are in the
// page (a log of any size, at any rate, keeps a few dozen nodes); searched on the server.

import { api, path } from "./api.js";
import { clear, h, shown } from "./dom.js";

const ROW = 18; // px, as in style.css .log .row
const TAIL = 256 * 1024; // bytes shown before following
const KEEP = 200000; // lines kept in the page; older ones are left to the download
const DROP = 20000;

export class LogView {
  constructor(jobId, role, index) {
    this.base = `/jobs/${path(jobId, "tasks", role, index)}/log`;
    this.lines = [];
    this.dropped = 0;
    this.stream = null;
    this.pending = false;
    this.follow = true;
    this.rows = h("div", { class: "rows" });
    this.spacer = h("div", { class: "spacer" }, this.rows);
    this.box = h("div", { class: "log", tabindex: "0", onscroll: () => this.scrolled() }, this.spacer);
    this.note = h("p", { class: "note" });
    this.status = h("span", { class: "status" });
    this.hits = h("ol", { class: "hits" });
    const query = h("input", { type: "search", placeholder: "search this log", "aria-label": "search" });
    const form = h(
      "form",
      { class: "search", onsubmit: (event) => { event.preventDefault(); this.search(query.value); } },
      query,
      h("button", { type: "submit" }, "Search"),
    );
    const followBox = h("input", {
      type: "checkbox",
      checked: true,
      onchange: (event) => { this.follow = event.target.checked; if (this.follow) this.toEnd(); },
    });
    this.element = h(
      "section",
      { class: "logview" },
      h(
        "div",
        { class: "toolbar" },
        h("label", {}, followBox, " follow"),
        form,
        h("a", { href: `/api/v1${this.base}/download`, download: "" }, "Download"),
        this.status,
      ),
      this.note,
      this.box,
      this.hits,
    );
  }

  async start() {
    const probe = await api(`${this.base}?start=0&end=0`, { raw: true });
    const size = Number(probe.headers.get("X-Log-Size") || 0);
    const start = Math.max(0, size - TAIL);
    const response = await api(`${this.base}?start=${start}`, { raw: true });
    const bytes = new Uint8Array(await response.arrayBuffer());
    const from = start > 0 ? bytes.indexOf(10) + 1 : 0; // a line cut by the tail: left out
    const to = bytes.lastIndexOf(10) + 1; // a part line comes again, whole, when followed
    if (start > 0) {
      this.note.textContent = `${start + from} earlier bytes: search or download the log for them`;
    }
    this.add(new TextDecoder().decode(bytes.subarray(from, Math.max(from, to))));
    this.listen(start + Math.max(from, to));
  }

  listen(offset) {
    this.stream = new EventSource(`/api/v1${this.base}/follow?start=${offset}`);
    this.status.textContent = "following";
    this.stream.addEventListener("log", (event) => this.add(JSON.parse(event.data).text));
    this.stream.addEventListener("end", () => {
      this.status.textContent = "the job has ended";
      this.close();
    });
    this.stream.addEventListener("error", () => {
      if (this.stream && this.stream.readyState === EventSource.CLOSED) {
        this.status.textContent = "not following (the server closed the stream)";
      } else {
        this.status.textContent = "reconnecting…";
      }
    });
  }

  add(text) {
    if (!text) return;
    const lines = text.split("\n");
    if (lines[lines.length - 1] === "") lines.pop();
    for (const line of lines) this.lines.push(line);
    if (this.lines.length > KEEP) {
      this.lines.splice(0, DROP);
      this.dropped += DROP;
      this.note.textContent = `${this.dropped} earlier lines are not kept here: search or download the log`;
    }
    this.schedule();
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.spacer.style.height = `${this.lines.length * ROW}px`;
      if (this.follow) this.toEnd();
      this.render();
    });
  }

  toEnd() {
    this.box.scrollTop = this.box.scrollHeight;
  }

  scrolled() {
    const atEnd = this.box.scrollTop + this.box.clientHeight >= this.box.scrollHeight - ROW;
    if (!atEnd && this.follow) {
      this.follow = false;
      this.element.querySelector(".toolbar input[type=checkbox]").checked = false;
    }
    this.render();
  }

  render() {
    const first = Math.max(0, Math.floor(this.box.scrollTop / ROW) - 5);
    const count = Math.ceil(this.box.clientHeight / ROW) + 10;
    const rows = [];
    for (let i = first; i < Math.min(this.lines.length, first + count); i++) {
      const row = h("div", { class: "row" }, shown(this.lines[i]));
      row.style.top = `${i * ROW}px`; // through the CSSOM: the page's policy allows no inline style
      rows.push(row);
    }
    this.rows.replaceChildren(...rows);
  }

  async search(query) {
    clear(this.hits);
    if (!query) return;
    this.status.textContent = "searching…";
    try {
      const found = await api(`${this.base}/search?q=${encodeURIComponent(query)}&limit=100`);
      for (const hit of found.hits) {
        this.hits.append(h("li", {}, h("code", {}, `@${hit.offset}`), " ", shown(hit.line, 500)));
      }
      const more = found.next === null ? "" : " (more after these: narrow the search)";
      const lines = found.hits.length === 1 ? "line" : "lines";
      this.status.textContent = `${found.hits.length} ${lines} found${more}`;
    } catch (error) {
      this.status.textContent = error.message;
    }
  }

  close() {
    if (this.stream) this.stream.close();
    this.stream = null;
  }
}
