// The dashboard: sign-in, jobs, a job (tasks, logs, events, its file), workflows and their
// runs, queues, submit. Routes are the part of the address after '#': #/jobs, #/jobs/ID,
// #/workflows, #/workflows/TEAM/NAME, #/runs/ID, #/queues, #/submit.

import { api, idempotencyKey, onSignedOut, path, Problem, session, signIn, signOut } from "./api.js";
import { clear, failure, h, shown, stateBadge, took, when } from "./dom.js";
import { UsageCharts } from "./charts.js";
import { LogView } from "./logview.js";
import { runView, workflowsView, workflowView } from "./workflows.js";

const main = document.getElementById("main");
const STATES = ["", "queued", "starting", "running", "succeeded", "failed", "cancelled"];
const ENDED = ["succeeded", "failed", "cancelled"];
let me = null;
let leaving = []; // what the current view must close when another is shown

function leave() {
  leaving.forEach((close) => close());
  leaving = [];
}

// A stream the server closed for good (a 401 once the session ended, a deleted job): ask
// whether the session still holds, and sign in again where it does not.
function watched(stream) {
  stream.addEventListener("error", async () => {
    if (stream.readyState !== EventSource.CLOSED) return;
    try {
      await session();
    } catch (error) {
      if (error.status === 401) signInView("Your session has ended: sign in again.");
    }
  });
  return stream;
}

// -- sign-in ---------------------------------------------------------------------------

function signInView(message) {
  leave();
  me = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("sign-out").hidden = true;
  document.getElementById("who").textContent = "";
  const token = h("input", { type: "password", name: "token", autocomplete: "off", required: true, "aria-label": "token" });
  const problem = h("p", { class: "error", role: "alert" }, message || "");
  const form = h(
    "form",
    {
      class: "sign-in",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          signedIn(await signIn(token.value));
          route();
        } catch (error) {
          problem.textContent = error.message;
        }
      },
    },
    h("h1", {}, "Sign in"),
    h("p", {}, "With an API token (`trainfleet token create`, or the one the server printed)."),
    token,
    h("button", { type: "submit" }, "Sign in"),
    problem,
  );
  clear(main, form);
  token.focus();
}

function signedIn(view) {
  me = view;
  document.getElementById("nav").hidden = false;
  document.getElementById("sign-out").hidden = false;
  const teams = Object.entries(view.teams).map(([team, role]) => `${team}: ${role}`).join(", ");
  document.getElementById("who").textContent = `${view.user}${view.admin ? " (administrator)" : ""}${teams ? ` — ${teams}` : ""}`;
}

// -- jobs ------------------------------------------------------------------------------

async function jobsView(query) {
  const filters = new URLSearchParams(query);
  const field = (name, label, attrs = {}) =>
    h("label", {}, label, h("input", { name, value: filters.get(name) || "", ...attrs }));
  const state = h("select", { name: "state" }, STATES.map((s) => h("option", { value: s, selected: s === (filters.get("state") || "") }, s || "any")));
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        const chosen = new URLSearchParams();
        for (const [name, value] of new FormData(form)) if (value) chosen.append(name, value);
        location.hash = `#/jobs?${chosen}`;
      },
    },
    h("label", {}, "state ", state),
    field("name", "name "),
    field("user", "user "),
    field("team", "team "),
    field("queue", "queue "),
    field("label", "label ", { placeholder: "key=value" }),
    h("button", { type: "submit" }, "Filter"),
  );
  const body = h("tbody");
  const more = h("button", { type: "button", hidden: true }, "More");
  const table = h(
    "table",
    { class: "jobs" },
    h("thead", {}, h("tr", {}, ["Job", "State", "User", "Team", "Created", "Ran", "Why"].map((t) => h("th", {}, t)))),
    body,
  );
  const problem = h("div");
  const counts = h("p", { class: "counts" });
  clear(main, h("h1", {}, "Jobs"), form, counts, problem, table, more);
  const rows = new Map();

  function row(job) {
    const tr = h(
      "tr",
      { "data-job": job.id },
      h("td", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.name), h("div", { class: "id" }, job.id)),
      h("td", {}, stateBadge(job.state, job.code || job.waiting_code)),
      h("td", {}, job.user),
      h("td", {}, job.team),
      h("td", {}, when(job.created_at)),
      h("td", {}, took(job.started_at, job.finished_at)),
      h("td", { class: "why" }, shown(job.waiting || job.reason || "", 300)),
    );
    const old = rows.get(job.id);
    if (old) old.replaceWith(tr);
    rows.set(job.id, tr);
    return tr;
  }

  async function page(cursor) {
    const asked = new URLSearchParams(filters);
    asked.set("limit", "50");
    if (cursor) asked.set("cursor", cursor);
    try {
      const found = await api(`/jobs?${asked}`);
      if (!cursor) showCounts(found.counts || {});
      body.append(...found.jobs.map(row));
      more.hidden = !found.next_cursor;
      more.onclick = () => page(found.next_cursor);
      if (!found.jobs.length && !cursor) body.append(h("tr", {}, h("td", { colspan: 7 }, "No jobs.")));
    } catch (error) {
      clear(problem, failure(error));
    }
  }
  function showCounts(byState) {
    const parts = Object.entries(byState).map(([state, count]) => {
      const chosen = new URLSearchParams(filters);
      chosen.set("state", state);
      return h("a", { href: `#/jobs?${chosen}` }, `${state} ${count}`);
    });
    counts.replaceChildren(...parts.flatMap((part, i) => (i ? [" · ", part] : [part])));
  }

  await page(null);
  leaving.push(liveJobs(filters, rows, row, body));
}

// Live rows: the server's change feed. The jobs it names are read again (a few times a
// second at most, each once) and their rows replaced, or added on top for a new job that
// the filters match; a deleted job's row is greyed. A lost stretch of the feed: read again.
function liveJobs(filters, rows, row, body) {
  const feed = watched(new EventSource("/api/v1/events/follow"));
  const pending = new Set();
  let timer = null;
  const refresh = async (jobId) => {
    try {
      const { job } = await api(`/jobs/${path(jobId)}`);
      if (!matches(job, filters)) return;
      const tr = row(job);
      if (!tr.isConnected) body.prepend(tr);
    } catch (error) {
      if (error instanceof Problem && error.status === 404 && rows.has(jobId)) {
        rows.get(jobId).classList.add("gone");
      }
    }
  };
  const flush = () => {
    timer = null;
    const jobs = [...pending];
    pending.clear();
    jobs.forEach(refresh);
  };
  feed.addEventListener("change", (event) => {
    const change = JSON.parse(event.data);
    if (change.code === "deleted") {
      rows.get(change.job_id)?.classList.add("gone");
      return;
    }
    pending.add(change.job_id);
    timer = timer || setTimeout(flush, 250);
  });
  feed.addEventListener("notice", (event) => {
    if (JSON.parse(event.data).resync) route();
  });
  return () => {
    feed.close();
    clearTimeout(timer);
  };
}

function matches(job, filters) {
  for (const [name, value] of filters) {
    if (name === "label") {
      const [key, wanted] = value.split("=");
      if ((job.labels || {})[key] !== wanted) return false;
    } else if (name in job && String(job[name]) !== value) {
      return false;
    }
  }
  return true;
}

// -- a job -----------------------------------------------------------------------------

async function jobView(jobId) {
  let details;
  try {
    details = await api(`/jobs/${path(jobId)}`);
  } catch (error) {
    clear(main, h("h1", {}, jobId), failure(error.status === 404 ? new Error(`job ${jobId} does not exist (or was deleted)`) : error));
    return;
  }
  const { job } = details;
  const message = h("p", { class: "error", role: "alert" });
  const actions = h("div", { class: "actions" });
  const act = (label, run) =>
    h("button", {
      type: "button",
      onclick: async () => {
        message.textContent = "";
        try {
          await run();
        } catch (error) {
          message.textContent = error.message;
        }
      },
    }, label);
  if (details.may.includes("stop") && !ENDED.includes(job.state)) {
    actions.append(act("Stop", async () => { await api(`/jobs/${path(jobId)}/cancel`, { method: "POST" }); await reload(); }));
  }
  if (details.may.includes("delete")) {
    actions.append(act("Delete", async () => {
      if (!confirm(`Delete ${jobId} and its logs?`)) return;
      await api(`/jobs/${path(jobId)}?force=true`, { method: "DELETE" });
      location.hash = "#/jobs";
    }));
  }
  const tasks = h("tbody", {}, details.tasks.map((task) => taskRow(jobId, task)));
  const events = h("ol", { class: "events" }, details.events.map(eventItem));
  const services = h("ul", { class: "services", "aria-label": "services" });
  showServices(services, details.services);
  const spec = h("pre", { class: "spec" }, job.spec);
  const logs = h("div", { class: "logs" });
  const usage = new UsageCharts(jobId);
  clear(
    main,
    h("h1", {}, job.name, " ", stateBadge(job.state, job.code)),
    h("p", { class: "id" }, `${job.id} · ${job.user} · team ${job.team} · ${when(job.created_at)}`),
    h("p", { class: "why" }, shown(job.waiting || job.reason || "", 1000)),
    services,
    actions,
    message,
    h("h2", {}, "Tasks"),
    h("table", { class: "tasks" }, h("thead", {}, h("tr", {}, ["Task", "State", "Address", "GPUs", "Restarts", "Exit", "Why"].map((t) => h("th", {}, t)))), tasks),
    logs,
    h("h2", {}, "Resource use"),
    usage.element,
    h("h2", {}, "Events"),
    events,
    h("details", {}, h("summary", {}, "Job file as submitted"), spec),
  );
  const after = details.events.at(-1)?.id || 0;
  const feed = watched(new EventSource(`/api/v1/jobs/${path(jobId)}/events/follow?after=${after}`));
  feed.addEventListener("event", (event) => {
    events.append(eventItem(JSON.parse(event.data)));
    reload();
  });
  feed.addEventListener("end", () => { feed.close(); reload(); });
  // Services end after their job (a TensorBoard kept a while, or stopped just after it),
  // when its events have ended: read again until they have.
  let later = null;
  let left = false;
  leaving.push(() => { feed.close(); clearTimeout(later); left = true; });
  usage.start();
  leaving.push(() => usage.close());

  async function reload() {
    try {
      const now = await api(`/jobs/${path(jobId)}`);
      tasks.replaceChildren(...now.tasks.map((task) => taskRow(jobId, task)));
      main.querySelector("h1 .state").replaceWith(stateBadge(now.job.state, now.job.code));
      main.querySelector("p.why").textContent = shown(now.job.waiting || now.job.reason || "", 1000);
      showServices(services, now.services);
      const lasting = (now.services || []).some((service) => !ENDED.includes(service.state));
      if (ENDED.includes(now.job.state) && lasting && !left) {
        clearTimeout(later);
        later = setTimeout(reload, 3000);
      }
    } catch (error) {
      message.textContent = error.status === 404 ? "This job was deleted." : error.message;
      feed.close();
    }
  }

  function taskRow(id, task) {
    const name = `${task.role}/${task.index}`;
    return h(
      "tr",
      { "data-task": name },
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => openLog(id, task) }, name)),
      h("td", {}, stateBadge(task.state, task.code)),
      h("td", {}, task.address),
      h("td", {}, task.gpus),
      h("td", {}, task.restarts),
      h("td", {}, task.exit_code ?? ""),
      h("td", { class: "why" }, shown(task.reason || "", 300)),
    );
  }

  function openLog(id, task) {
    leaving.filter((close) => close.log).forEach((close) => close());
    const view = new LogView(id, task.role, task.index);
    const close = () => view.close();
    close.log = true;
    leaving.push(close);
    clear(logs, h("h2", {}, `Log of ${task.role}/${task.index}`), view.element);
    view.start().catch((error) => view.note.replaceChildren(failure(error)));
  }
  if (details.tasks.length) openLog(jobId, details.tasks[0]);
}

// A job's services (its TensorBoard, its notebook): each a link to where this server
// proxies it, opened in a tab of its own, only while it runs; else its state and why.
const SERVICE_TITLES = { tensorboard: "TensorBoard", notebook: "notebook" };

function showServices(list, services) {
  list.replaceChildren(...(services || []).map(serviceItem));
  list.hidden = !list.children.length;
}

function serviceItem(service) {
  const title = SERVICE_TITLES[service.name] || service.name;
  const where = servicePage(service);
  const running = service.state === "running";
  return h(
    "li",
    { "data-service": service.name },
    running && where ? h("a", { href: where, target: "_blank", rel: "noopener" }, title) : h("span", { class: "name" }, title),
    " ",
    stateBadge(service.state),
    running ? "" : h("span", { class: "why" }, " ", shown(service.reason || "", 300)),
  );
}

// Where a service's page is: a path of this server only (never another site's address);
// JupyterLab's own page under a notebook's.
function servicePage(service) {
  const at = String(service.path || "");
  if (!/^\/[^/\\]/.test(at)) return null;
  return service.name === "notebook" ? `${at.replace(/\/?$/, "/")}lab` : at;
}

function eventItem(event) {
  const what = event.task ? `${event.task} ${event.state}` : `job ${event.state}`;
  return h("li", {}, h("time", {}, when(event.time)), " ", what, event.code ? h("code", {}, event.code) : "", " ", shown(event.message || "", 500));
}

// -- queues ----------------------------------------------------------------------------

async function queuesView() {
  const body = h("tbody");
  const head = ["Queue", "Team", "Cohort", "Nominal", "Used", "Borrowed", "Running", "Waiting"];
  clear(main, h("h1", {}, "Queues"), h("table", { class: "queues" }, h("thead", {}, h("tr", {}, head.map((t) => h("th", {}, t)))), body));
  try {
    const states = await api("/queues");
    main.append(wouldStartForm(states.map((state) => state.queue.name)));
    for (const state of states) {
      const waiting = h("td", { class: "why" }, state.waiting.length ? "" : "none");
      body.append(
        h(
          "tr",
          { "data-queue": state.queue.name },
          h("td", {}, state.queue.name),
          h("td", {}, state.team),
          h("td", {}, state.queue.cohort || ""),
          h("td", {}, amounts(state.queue.nominal)),
          h("td", {}, amounts(used(state.used))),
          h("td", {}, amounts(borrowed(state.queue.nominal, used(state.used)))),
          h("td", {}, String(state.running.length)),
          waiting,
        ),
      );
      if (state.waiting.length) showWaiting(state.queue.name, waiting);
    }
  } catch (error) {
    main.append(failure(error));
  }
}

// "Would a job of N GPUs start now?": the scheduler's answer, nothing submitted.
function wouldStartForm(names) {
  const queue = h("select", { name: "queue", "aria-label": "queue" }, names.map((n) => h("option", { value: n }, n)));
  const gpu = h("input", { name: "gpu", type: "number", min: "0", step: "any", value: "1", "aria-label": "GPUs" });
  const cpu = h("input", { name: "cpu", placeholder: "cpu (2, 500m)", "aria-label": "CPUs" });
  const memory = h("input", { name: "memory", placeholder: "memory (8Gi)", "aria-label": "memory" });
  const answer = h("output", { class: "answer" });
  return h(
    "form",
    {
      class: "would-start",
      onsubmit: async (event) => {
        event.preventDefault();
        const asked = new URLSearchParams({ gpu: gpu.value || "0" });
        if (cpu.value) asked.set("cpu", cpu.value);
        if (memory.value) asked.set("memory", memory.value);
        try {
          const found = await api(`/queues/${path(queue.value)}/would-start?${asked}`);
          answer.textContent = found.starts ? "Yes: it would start now." : `No (${found.code}): ${found.message}`;
        } catch (error) {
          answer.textContent = error.message;
        }
      },
    },
    "Would a job of ", gpu, " GPUs, ", cpu, memory, " start now in ", queue, "? ",
    h("button", { type: "submit" }, "Ask"),
    " ",
    answer,
  );
}

// The queue's waiting jobs, each with why it waits (its code and message).
async function showWaiting(queue, cell) {
  const found = await api(`/jobs?queue=${encodeURIComponent(queue)}&state=queued&limit=20`);
  cell.replaceChildren(
    ...found.jobs.map((job) =>
      h("div", {}, h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.id), " ", h("code", {}, job.waiting_code || ""), " ", shown(job.waiting || "", 200)),
    ),
  );
}

// ``used`` as the API gives it (cpu millicores, memory bytes, gpu thousandths) in a quota's units.
function used(raw) {
  const out = { custom: {} };
  for (const [name, value] of Object.entries(raw || {})) {
    if (name === "cpu") out.cpu = value;
    else if (name === "memory") out.memory = value;
    else if (name === "gpu") out.gpu = value / 1000;
    else out.custom[name] = value;
  }
  return out;
}

function borrowed(nominal, use) {
  const out = { custom: {} };
  for (const name of ["cpu", "memory", "gpu"]) {
    if (nominal?.[name] !== null && nominal?.[name] !== undefined && use[name] > nominal[name]) {
      out[name] = use[name] - nominal[name];
    }
  }
  return out;
}

function amounts(quota) {
  const parts = [];
  if (quota?.cpu !== null && quota?.cpu !== undefined) parts.push(`cpu ${quota.cpu / 1000}`);
  if (quota?.memory !== null && quota?.memory !== undefined) parts.push(`memory ${(quota.memory / 2 ** 30).toFixed(1)} GiB`);
  if (quota?.gpu !== null && quota?.gpu !== undefined) parts.push(`gpu ${quota.gpu}`);
  for (const [name, value] of Object.entries(quota?.custom || {})) parts.push(`${name} ${value}`);
  return parts.join(", ") || "—";
}

// -- submit ----------------------------------------------------------------------------

function submitView() {
  const text = h("textarea", { name: "job", rows: 18, spellcheck: "false", "aria-label": "job file", placeholder: "name: my-job\nroles:\n  worker: {replicas: 2, command: python train.py}" });
  const file = h("input", { type: "file", accept: ".yaml,.yml,.json", onchange: async () => { text.value = await file.files[0].text(); } });
  const problems = h("ul", { class: "problems", role: "alert" });
  const button = h("button", { type: "submit" }, "Submit");
  let sent = null; // the text last sent and its key: the same text sent again is one job
  const form = h(
    "form",
    {
      class: "submit",
      onsubmit: async (event) => {
        event.preventDefault();
        if (button.disabled) return; // a second click while the first is under way
        clear(problems);
        if (sent?.text !== text.value) sent = { text: text.value, key: idempotencyKey() };
        button.disabled = true;
        try {
          const done = await api("/jobs", { method: "POST", body: sent.text, type: "application/yaml", headers: { "Idempotency-Key": sent.key } });
          location.hash = `#/jobs/${encodeURIComponent(done.job.id)}`;
        } catch (error) {
          const listed = error.problems.length ? error.problems : [{ message: error.message }];
          for (const problem of listed) {
            const where = problem.line ? `line ${problem.line}${problem.field ? `, ${problem.field}` : ""}: ` : problem.field ? `${problem.field}: ` : "";
            problems.append(h("li", { "data-line": problem.line || "" }, where, problem.message));
          }
        } finally {
          button.disabled = false;
        }
      },
    },
    h("h1", {}, "Submit a job"),
    h("p", {}, "Paste a job file, or choose one."),
    file,
    text,
    button,
    problems,
  );
  clear(main, form);
}

// -- routing ---------------------------------------------------------------------------

async function route() {
  leave();
  if (location.hash.startsWith("#token=")) {
    // `trainfleet ui`'s link: its token opens a session once, and leaves the address bar
    const token = decodeURIComponent(location.hash.slice("#token=".length));
    history.replaceState(null, "", "#/jobs");
    try {
      signedIn(await signIn(token));
    } catch (error) {
      signInView(error.message);
      return;
    }
  }
  if (!me) {
    try {
      signedIn(await session());
    } catch (error) {
      signInView(error.status === 401 ? "" : error.message);
      return;
    }
  }
  const [where, query] = (location.hash.slice(1) || "/jobs").split("?");
  const parts = where.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1]) await jobView(parts[1]);
  else if (parts[0] === "workflows" && parts[2]) await workflowView(main, parts[1], parts[2], (close) => leaving.push(close));
  else if (parts[0] === "workflows") await workflowsView(main);
  else if (parts[0] === "runs" && parts[1]) await runView(main, parts[1], (close) => leaving.push(close));
  else if (parts[0] === "queues") await queuesView();
  else if (parts[0] === "submit") submitView();
  else await jobsView(query || "");
}

onSignedOut((detail) => signInView(detail.includes("ended") ? "Your session has ended: sign in again." : detail));
document.getElementById("sign-out").addEventListener("click", async () => {
  await signOut().catch(() => {});
  signInView("Signed out.");
});
window.addEventListener("hashchange", route);
route();
