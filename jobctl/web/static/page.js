// The jobctl page: pipelines as step indicators, the jobs, and their controls.
// It reads the API relative to its own address (so it works under any prefix),
// and refreshes when the change stream (api/events) says something moved: it
// never polls. Everything a job says is put in with textContent, never as HTML.
"use strict";

const LIMIT = 200;
let refreshing = null;
let again = false;

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
  }
  refresh(); // an approval changes only the intent, which the stream sends with the job's next move
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

function stepView(stage) {
  const job = stage.job;
  return el("li", { class: "step", "data-job": job.id, "data-stage": stage.stage, "data-step": stage.step },
    el("div", { class: "name" }, stage.stage, " ", el("span", { class: "badge", "data-step": stage.step }, stage.step)),
    between(job) ? null : progress(job),
    job.attempt > 1 ? el("div", { class: "detail" }, `attempt ${job.attempt}`) : null,
    job.next_attempt_at ? el("div", { class: "detail", "data-next-attempt": job.next_attempt_at }, `next attempt at ${job.next_attempt_at}`) : null,
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

function jobRow(job) {
  return el("tr", { "data-job": job.id, "data-step": job.step },
    el("td", { class: "id" }, job.id),
    el("td", {}, job.kind, job.pipeline ? el("div", { class: "detail" }, `${job.pipeline.name} / ${job.pipeline.stage}`) : null),
    el("td", {}, el("span", { class: "badge", "data-step": job.step }, job.step)),
    el("td", {}, (!between(job) && progress(job)) || "-"),
    el("td", {}, String(job.attempt)),
    el("td", {}, failure(job)),
    el("td", {}, result(job)),
    el("td", {}, controls(job)));
}

function keepOpen(root) {
  // Which result panes are open, so a refresh does not fold what somebody is reading.
  return new Set([...root.querySelectorAll("details[open]")].map((d) => d.closest("[data-job]")?.dataset.job));
}

function reopen(root, open) {
  for (const d of root.querySelectorAll("details")) if (open.has(d.closest("[data-job]")?.dataset.job)) d.open = true;
}

async function load() {
  const [pipelines, jobs] = await Promise.all([api("api/pipelines"), api(`api/jobs?limit=${LIMIT}`)]);
  const open = keepOpen(document.body);
  const list = document.getElementById("pipelines");
  list.replaceChildren(...(pipelines.pipelines.length
    ? pipelines.pipelines.map(pipelineView) : [el("p", { class: "empty" }, "No pipelines yet.")]));
  document.querySelector("#jobs tbody").replaceChildren(...jobs.jobs.map(jobRow));
  reopen(document.body, open);
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

function refresh() {
  // One load at a time; changes that come during one are read by one more.
  if (refreshing) { again = true; return; }
  refreshing = load().catch((error) => say(error.message)).finally(() => {
    refreshing = null;
    if (again) { again = false; refresh(); }
  });
}

function listen() {
  const live = document.getElementById("live");
  const events = new EventSource("api/events");
  events.onopen = () => { live.dataset.state = "live"; live.textContent = "live"; };
  events.onerror = () => { live.dataset.state = "reconnecting"; live.textContent = "reconnecting"; };
  events.addEventListener("jobs", () => {
    document.body.dataset.events = String(Number(document.body.dataset.events || 0) + 1);
    refresh();
  });
}

refresh();
listen();
