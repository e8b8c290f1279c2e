// Workflows: the list (#/workflows), a workflow with its schedule and runs
// (#/workflows/TEAM/NAME), and a run (#/runs/ID) drawn as its steps' graph, each step
// linking to its latest job's page, read again while the run goes on.

import { api, path } from "./api.js";
import { clear, failure, h, shown, stateBadge, took, when } from "./dom.js";
import { dagView, graphOf } from "./dag.js";

const RUN_ENDED = ["succeeded", "failed", "cancelled", "skipped"];
const READ_AGAIN = 1000; // ms, a run's page while it goes on
const READ_WORKFLOW_AGAIN = 3000; // ms, a workflow's page while one of its runs goes on
const RUNS_SHOWN = 100; // a workflow's latest runs

function workflowHref(team, name) {
  return `#/workflows/${encodeURIComponent(team)}/${encodeURIComponent(name)}`;
}

function runHref(runId) {
  return `#/runs/${encodeURIComponent(runId)}`;
}

function table(className, head, body) {
  return h("table", { class: className }, h("thead", {}, h("tr", {}, head.map((t) => h("th", {}, t)))), body);
}

function scheduleText(schedule) {
  return schedule ? `${schedule.cron} (${schedule.timezone})` : "none";
}

// A value as text: strings as they are, anything else as JSON.
function valueText(value) {
  return shown(typeof value === "string" ? value : JSON.stringify(value), 300);
}

function parametersText(parameters) {
  return Object.entries(parameters || {}).map(([name, value]) => `${name}=${valueText(value)}`).join(", ");
}

// -- the list --------------------------------------------------------------------------

export async function workflowsView(main) {
  const body = h("tbody");
  const problem = h("div");
  const head = ["Workflow", "Team", "Owner", "Schedule", "Next run", "Last run"];
  clear(main, h("h1", {}, "Workflows"), problem, table("workflows", head, body));
  let found;
  try {
    found = await api("/workflows");
  } catch (error) {
    clear(problem, failure(error));
    return;
  }
  if (!found.length) {
    body.append(h("tr", {}, h("td", { colspan: head.length }, "No workflows (`trainfleet workflow submit` stores one).")));
    return;
  }
  for (const { workflow, schedule, next_time: next, last_run: run } of found) {
    const last = run ? [h("a", { href: runHref(run.id) }, `#${run.number}`), " ", stateBadge(run.state, run.code), " ", when(run.started_at || run.created_at)] : "";
    body.append(
      h(
        "tr",
        { "data-workflow": `${workflow.team}/${workflow.name}` },
        h("td", {}, h("a", { href: workflowHref(workflow.team, workflow.name) }, workflow.name)),
        h("td", {}, workflow.team),
        h("td", {}, workflow.user),
        h("td", { class: "schedule" }, scheduleText(schedule), schedule ? [" ", stateBadge(schedule.code, schedule.reason)] : ""),
        h("td", { class: "next" }, when(next)),
        h("td", { class: "last" }, last),
      ),
    );
  }
}

// -- a workflow ------------------------------------------------------------------------

export async function workflowView(main, team, name, onLeave) {
  const title = h("h1", {}, name);
  const about = h("p", { class: "id" });
  const schedule = h("div", { class: "schedule" });
  const runs = h("tbody");
  const problem = h("div");
  const source = h("pre", { class: "spec" });
  const head = ["Run", "State", "Trigger", "Scheduled for", "Started", "Ran", "Parameters", "Why"];
  clear(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "Workflows"), ` / ${team} /`),
    title,
    about,
    problem,
    h("h2", {}, "Schedule"),
    schedule,
    h("h2", {}, "Runs"),
    table("runs", head, runs),
    h("details", {}, h("summary", {}, "Workflow file"), source),
  );
  let timer = null;
  let left = false;
  onLeave(() => {
    left = true;
    clearTimeout(timer);
  });

  async function read() {
    let details, found;
    try {
      const at = `/workflows/${path(team, name)}`;
      [details, found] = await Promise.all([api(at), api(`${at}/runs?limit=${RUNS_SHOWN}`)]);
    } catch (error) {
      clear(problem, failure(error.status === 404 ? new Error(`workflow ${name} of team ${team} does not exist (or was deleted)`) : error));
      return;
    }
    if (left) return;
    clear(problem);
    const { workflow } = details;
    about.textContent = `${workflow.team} · owner ${workflow.user} · ${workflow.filename} · updated ${when(workflow.updated_at)}`;
    source.textContent = workflow.source;
    showSchedule(schedule, details);
    runs.replaceChildren(...found.map(runRow));
    if (!found.length) runs.append(h("tr", {}, h("td", { colspan: head.length }, "No runs yet.")));
    if (found.some((run) => !RUN_ENDED.includes(run.state))) timer = setTimeout(read, READ_WORKFLOW_AGAIN);
  }
  await read();
}

function showSchedule(element, details) {
  const { schedule } = details;
  if (!schedule) {
    clear(element, h("p", {}, "None: it runs when it is submitted or run by hand."));
    return;
  }
  clear(
    element,
    h("p", {}, scheduleText(schedule), " ", stateBadge(schedule.code), " ", h("span", { class: "why" }, shown(schedule.reason || "", 300))),
    h("p", { class: "id" }, schedule.last_time ? `last handled time ${when(schedule.last_time)}` : ""),
    details.next_times.length ? h("p", {}, "Next: ", details.next_times.map(when).join(" · ")) : h("p", { class: "id" }, "No next time while it is not active."),
  );
}

function runRow(run) {
  return h(
    "tr",
    { "data-run": run.id },
    h("td", {}, h("a", { href: runHref(run.id) }, `#${run.number}`), h("div", { class: "id" }, run.id)),
    h("td", {}, stateBadge(run.state, run.code)),
    h("td", {}, run.trigger),
    h("td", {}, when(run.scheduled_for)),
    h("td", {}, when(run.started_at)),
    h("td", {}, took(run.started_at, run.finished_at)),
    h("td", { class: "why" }, parametersText(run.parameters)),
    h("td", { class: "why" }, shown(run.reason || "", 300)),
  );
}

// -- a run -----------------------------------------------------------------------------

export async function runView(main, runId, onLeave) {
  const crumbs = h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "Workflows"));
  const title = h("h1", {}, runId);
  const about = h("p", { class: "id" });
  const why = h("p", { class: "why" });
  const parameters = h("dl", { class: "parameters", "aria-label": "parameters" });
  const actions = h("div", { class: "actions" });
  const message = h("p", { class: "error", role: "alert" });
  const graph = h("div", { class: "graph" });
  const steps = h("tbody");
  const source = h("pre", { class: "spec" });
  const head = ["Step", "State", "Tries", "Jobs (latest last)", "Started", "Ran", "Why", ""];
  clear(
    main,
    crumbs,
    title,
    about,
    why,
    parameters,
    actions,
    message,
    h("h2", {}, "Steps"),
    graph,
    table("steps", head, steps),
    h("details", {}, h("summary", {}, "Workflow file as run"), source),
  );
  let timer = null;
  let left = false;
  let drawn = null; // the details last shown: unchanged ones are not drawn again
  onLeave(() => {
    left = true;
    clearTimeout(timer);
  });

  // What the server answers to a stop or a retry (its refusal's own words where it refuses).
  const act = (label, run, attrs = {}) =>
    h(
      "button",
      {
        type: "button",
        ...attrs,
        onclick: async () => {
          message.textContent = "";
          try {
            show(await run());
          } catch (error) {
            message.textContent = error.message;
          }
        },
      },
      label,
    );
  const change = (what) => api(`/workflow-runs/${path(runId)}/${what}`, { method: "POST" });

  function show(details) {
    if (left) return;
    const { run } = details;
    const ended = RUN_ENDED.includes(run.state);
    clearTimeout(timer);
    if (!ended) timer = setTimeout(read, READ_AGAIN);
    const seen = JSON.stringify(details);
    if (seen === drawn) return; // nothing moved: the links stay under the pointer
    drawn = seen;
    clear(crumbs, h("a", { href: "#/workflows" }, "Workflows"), ` / ${run.team} / `, h("a", { href: workflowHref(run.team, run.workflow) }, run.workflow));
    clear(title, `${run.workflow} #${run.number} `, stateBadge(run.state, run.code));
    const timing = run.scheduled_for ? ` · for ${when(run.scheduled_for)}` : "";
    about.textContent = `${run.id} · ${run.trigger} by ${run.user} · team ${run.team} · ${when(run.started_at || run.created_at)}${timing} · ran ${took(run.started_at, run.finished_at) || "0s"}${run.retries ? ` · retried ${run.retries}×` : ""}`;
    why.textContent = shown(run.reason || "", 1000);
    clear(parameters, ...Object.entries(run.parameters || {}).flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, valueText(value))]));
    actions.replaceChildren();
    const may = new Set(details.may || []);
    if (!ended && may.has("stop")) actions.append(act("Stop", () => change("stop")));
    if ((run.state === "failed" || run.state === "cancelled") && may.has("retry")) actions.append(act("Retry", () => change("retry")));
    const needs = graphOf(details);
    clear(graph, dagView(needs, details.steps), needs ? "" : h("p", { class: "note" }, "The server does not say which steps need which: they are shown without arrows."));
    const order = needs ? [...needs.keys()] : details.steps.map((step) => step.step);
    const byName = new Map(details.steps.map((step) => [step.step, step]));
    steps.replaceChildren(...order.map((name) => stepRow(byName.get(name), ended && run.state !== "skipped" && may.has("retry"))));
    source.textContent = run.source;
  }

  function stepRow(step, retryable) {
    const jobs = step.jobs.map((job, i) => [i ? " " : "", h("a", { href: `#/jobs/${encodeURIComponent(job)}`, title: job }, `${i + 1}`)]);
    return h(
      "tr",
      { "data-step": step.step },
      h("td", {}, step.step),
      h("td", {}, stateBadge(step.state)),
      h("td", {}, String(step.tries)),
      h("td", {}, jobs.flat()),
      h("td", {}, when(step.started_at)),
      h("td", {}, took(step.started_at, step.finished_at)),
      h("td", { class: "why" }, shown(step.reason || "", 1000)),
      h("td", {}, retryable ? act("Retry from here", () => api(`/workflow-runs/${path(runId)}/retry?from=${encodeURIComponent(step.step)}`, { method: "POST" }), { class: "link", "aria-label": `Retry from ${step.step}` }) : ""),
    );
  }

  async function read() {
    try {
      show(await api(`/workflow-runs/${path(runId)}`));
    } catch (error) {
      if (left) return;
      message.textContent = error.status === 404 ? `run ${runId} does not exist (or its workflow was deleted)` : error.message;
      if (error.status !== 404 && error.status !== 401) timer = setTimeout(read, READ_AGAIN * 3); // a blip: read again
    }
  }
  await read();
}
