// The jobctl page: pipelines as step indicators, the jobs, and their controls.
// Everything it shows comes from the change stream (api/events, relative to
// its own address, so it works under any prefix): the stream begins with the
// whole present, and after that sends what changed. The page keeps the jobs by
// id and the pipelines by name, replaces them all on a full event, and draws
// from them alone: no order, repetition or timing of events can show a job
// twice. It never polls, and it says plainly when what it shows is not up to
// date. Everything a job says is put in with textContent, never as HTML.
"use strict";

const LIMIT = 200;
const PIPELINES = 50;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name.startsWith("data-")) node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined || child === "") continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function say(text) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.hidden = !text;
}

async function api(path, options) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${body.error || response.status}: ${body.message || response.statusText}`);
  return body;
}

async function act(job, what) {
  say("");
  try {
    await api(`api/jobs/${encodeURIComponent(job.id)}/${what}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
  } catch (error) {
    say(`${what} ${job.id}: ${error.message}`);
    draw(); // the button comes back: nothing changed
  }
  // What it changed comes by the stream, as anybody's change does.
}

function controls(job) {
  const box = el("div", { class: "actions" });
  const button = (what, label) => {
    const b = el("button", { class: what, type: "button", "data-action": what }, label);
    b.addEventListener("click", () => { b.disabled = true; act(job, what); });
    box.append(b);
  };
  if (job.step === "held") { button("approve", "Approve"); button("cancel", "Reject"); }
  else if (job.step === "pending" || job.step === "running") button("cancel", "Cancel");
  else if (job.retryable) button("retry", "Retry");
  // A job retried already shows its replacement; one cancelled for a dependency, where to retry.
  else if (job.replaced_by) box.append(el("span", { class: "detail", "data-replaced-by": job.replaced_by }, `retried as ${job.replaced_by}`));
  else if (job.cancelled_for) box.append(el("span", { class: "detail", "data-cancelled-for": job.cancelled_for }, `retry ${job.cancelled_for} instead`));
  return box.childElementCount ? box : null;
}

function progress(job) {
  if (!job.total) return null;
  return el("div", { class: "progress" },
    el("progress", { max: job.total, value: job.done }), el("span", {}, `${job.done} / ${job.total}`));
}

function result(job) {
  if (!job.has_result) return null;
  return el("details", { class: "result" }, el("summary", {}, "result"),
    el("pre", {}, JSON.stringify(job.result, null, 2)));
}

function waits(stage) {
  // The pipeline view says "for <id> (running)" of a waiting stage: say who waits.
  return stage.detail.startsWith("for ") ? `waits ${stage.detail}` : stage.detail;
}

function between(job) {
  // Between two attempts, what the record says of progress is the failed attempt's, not a current one's.
  return job.previous_attempt && job.state === "pending";
}

function failure(job) {
  // Why it ended (or why its previous attempt failed), in three lines at most (CSS clamps it: a long
  // error must not grow the card); "more" opens the whole text and the end of its last attempt's
  // output, read when first opened.
  const previous = job.previous_attempt;
  const text = previous ? `previous: ${previous.error}` : job.error;
  if (!text) return null;
  const log = el("pre", { class: "log" });
  const more = el("details", { class: "more" }, el("summary", {}, "more"),
    el("pre", { class: "full-error" }, text), log);
  more.addEventListener("toggle", () => {
    if (!more.open || log.dataset.state) return;
    log.dataset.state = "loading";
    api(`api/jobs/${encodeURIComponent(job.id)}/logs?bytes=4096`).then((tail) => {
      log.dataset.state = "loaded";
      log.textContent = `output of attempt ${tail.attempt}${tail.truncated ? ", its end" : ""}:\n${tail.text}`;
    }, (error) => {
      log.dataset.state = "none";
      log.textContent = `no output: ${error.message}`;
    });
  });
  const line = previous
    ? el("div", { class: "error previous", "data-previous": previous.attempt }, text)
    : el("div", { class: "error" }, text);
  return el("div", { class: "failure" }, line, more);
}

function unhandled(job) {
  // Workers have said what they handle, and none of the running ones handles this pending job's kind.
  if (job.unhandled !== true) return null;
  return el("div", { class: "detail unhandled", "data-unhandled": job.kind }, `no running worker handles kind ${job.kind}`);
}

function runLimits(job) {
  // Its place in the pick order and its attempts' limit, when the job sets them (priority 0, no timeout: nothing).
  const words = [];
  if (job.priority) words.push(`priority ${job.priority}`);
  if (job.timeout_text) words.push(`timeout ${job.timeout_text}`);
  if (!words.length) return null;
  return el("div", { class: "detail limits", "data-priority": String(job.priority), "data-timeout": job.timeout ?? "" }, words.join(", "));
}

function stepView(stage) {
  const job = stage.job;
  return el("li", { class: "step", "data-job": job.id, "data-stage": stage.stage, "data-step": stage.step },
    el("div", { class: "name" }, stage.stage, " ", el("span", { class: "badge", "data-step": stage.step }, stage.step)),
    between(job) ? null : progress(job),
    job.attempt > 1 ? el("div", { class: "detail" }, `attempt ${job.attempt}`) : null,
    runLimits(job),
    job.next_attempt_at ? el("div", { class: "detail", "data-next-attempt": job.next_attempt_at }, `next attempt at ${job.next_attempt_at}`) : null,
    unhandled(job),
    stage.detail && !job.error ? el("div", { class: "detail" }, waits(stage)) : null,
    failure(job),
    result(job),
    el("div", { class: "id" }, job.id),
    stage.history.length ? el("div", { class: "detail history" }, `earlier runs: ${stage.history.map((run) => `${run.id} (${run.state})`).join(", ")}`) : null,
    controls(job));
}

function pipelineView(pipeline) {
  return el("article", { class: "pipeline", "data-pipeline": pipeline.name, "data-state": pipeline.state },
    el("h3", {}, pipeline.name, " ", el("span", { class: "badge state" }, pipeline.state.replaceAll("_", " "))),
    el("ol", { class: "steps" }, ...pipeline.stages.map(stepView)));
}

// A job with an exclusive key runs only while no other job with that key runs: say which key it waits on.
function exclusive(job) {
  if (!job.exclusive) return null;
  return el("div", { class: "detail exclusive", "data-exclusive": job.exclusive }, `exclusive: ${job.exclusive}`);
}

function jobRow(job) {
  return el("tr", { "data-job": job.id, "data-step": job.step },
    el("td", { class: "id" }, job.id),
    el("td", {}, job.kind, job.pipeline ? el("div", { class: "detail" }, `${job.pipeline.name} / ${job.pipeline.stage}`) : null,
      runLimits(job), exclusive(job), unhandled(job)),
    el("td", {}, el("span", { class: "badge", "data-step": job.step }, job.step)),
    el("td", {}, (!between(job) && progress(job)) || "-"),
    el("td", {}, String(job.attempt)),
    el("td", {}, failure(job)),
    el("td", {}, result(job)),
    el("td", {}, controls(job)));
}

function keepOpen(root) {
  // Which result panes are open, so a redraw does not fold what somebody is reading.
  return new Set([...root.querySelectorAll("details[open]")].map((d) => d.closest("[data-job]")?.dataset.job));
}

function reopen(root, open) {
  for (const d of root.querySelectorAll("details")) if (open.has(d.closest("[data-job]")?.dataset.job)) d.open = true;
}

// -- what the page knows: the jobs by id, the pipelines by name ----------------

const known = { jobs: new Map(), pipelines: new Map() };

function applyEvent(data) {
  // One jobs event, as the stream sends it. A full one replaces everything; any other one
  // sets or deletes by key. Applying one twice, or an older one again, cannot add a row.
  if (data.full) { known.jobs = new Map(); known.pipelines = new Map(); }
  for (const job of data.jobs || []) known.jobs.set(job.id, job);
  for (const id of data.removed || []) known.jobs.delete(id);
  for (const pipeline of data.pipelines || []) known.pipelines.set(pipeline.name, pipeline);
  for (const name of data.removed_pipelines || []) known.pipelines.delete(name);
}

function newestFirst(a, b) {
  // As api/jobs and api/pipelines order them: by creation time, then id, newest first.
  return a[0] < b[0] ? 1 : a[0] > b[0] ? -1 : a[1] < b[1] ? 1 : a[1] > b[1] ? -1 : 0;
}

function shown() {
  const jobs = [...known.jobs.values()].map((job) => [job.created_at || "", job.id, job]).sort(newestFirst);
  const pipelines = [...known.pipelines.values()].map((pipeline) => {
    const newest = pipeline.stages.map((s) => [s.job.created_at || "", s.job.id]).sort(newestFirst)[0] || ["", ""];
    return [...newest, pipeline];
  }).sort(newestFirst);
  return { jobs: jobs.slice(0, LIMIT).map((x) => x[2]), pipelines: pipelines.slice(0, PIPELINES).map((x) => x[2]) };
}

function draw() {
  const { jobs, pipelines } = shown();
  const open = keepOpen(document.body);
  document.getElementById("pipelines").replaceChildren(...(pipelines.length
    ? pipelines.map(pipelineView) : [el("p", { class: "empty" }, "No pipelines yet.")]));
  document.querySelector("#jobs tbody").replaceChildren(...jobs.map(jobRow));
  reopen(document.body, open);
}

// -- the stream, and whether what is shown is up to date ------------------------

let stream = null;
let heard = 0; // Date.now() of the stream's last word
let every = 15; // seconds between the server's status events
let upToDate = null; // when what is shown was last known to be up to date
let synced = false; // a full event came on this connection

function clock(text) {
  return text ? new Date(text).toLocaleTimeString() : "";
}

function status(state, since) {
  // "live" only while the stream is open, the server says it reads the store, and the page holds its present.
  const live = document.getElementById("live");
  if (state === "live" && synced) {
    upToDate = new Date().toISOString();
    live.dataset.state = "live";
    live.textContent = "live";
    delete document.body.dataset.stale;
    live.removeAttribute("title");
    return;
  }
  if (state === "live" || (state === "connecting" && !upToDate)) {
    live.dataset.state = "connecting";
    live.textContent = "connecting…";
    return;
  }
  const when = since || upToDate;
  live.dataset.state = "stale";
  live.textContent = when ? `reconnecting… not up to date since ${clock(when)}` : "reconnecting… nothing read yet";
  live.title = when ? `what is shown is as of ${when}` : "";
  document.body.dataset.stale = when || "never";
}

function connect() {
  if (stream) stream.close();
  synced = false;
  heard = Date.now();
  const events = stream = new EventSource("api/events");
  events.addEventListener("jobs", (e) => {
    if (events !== stream) return;
    heard = Date.now();
    const data = JSON.parse(e.data);
    applyEvent(data);
    if (data.schedules) drawSchedules(data.schedules);
    if (data.full) {
      synced = true;
      document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
    }
    document.body.dataset.events = String(Number(document.body.dataset.events || 0) + 1);
    draw();
  });
  events.addEventListener("status", (e) => {
    if (events !== stream) return;
    heard = Date.now();
    const data = JSON.parse(e.data);
    every = Number(data.every) || every;
    status(data.state, data.since);
  });
  events.onerror = () => {
    if (events !== stream) return;
    // Until the next full event, what is shown may be behind: the browser connects again by itself,
    // unless the answer was not a stream at all (a refusal), when it gives up and this tries again.
    synced = false;
    status("stale", null);
    if (events.readyState === EventSource.CLOSED) setTimeout(() => { if (events === stream) connect(); }, 2000);
  };
}

// -- recurring schedules: the stream sends them all, with a full event and whenever they change ------------

function drawSchedules(schedules) {
  const rows = schedules.map((s) => el("tr", { "data-schedule": s.name },
    el("td", {}, s.name), el("td", {}, s.when), el("td", {}, s.kind),
    el("td", { class: "next" }, s.next || "-"), el("td", {}, s.fired || "-")));
  const empty = el("tr", {}, el("td", { colSpan: 5, class: "empty" }, "No schedules."));
  document.querySelector("#schedules tbody").replaceChildren(...(rows.length ? rows : [empty]));
  document.body.dataset.schedules = String(rows.length);
}

function watchdog() {
  // A stream that says nothing for two status intervals is gone without a word (a stopped server, a dead
  // proxy): say so, and connect again.
  if (stream && Date.now() - heard > (2 * every + 5) * 1000) {
    synced = false;
    status("stale", null);
    connect();
  }
}

connect();
setInterval(watchdog, 1000);
