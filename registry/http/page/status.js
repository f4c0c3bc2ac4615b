// The status page's behaviour: filters, live updates, admin actions. No framework, no build.
//
// The server renders the page (registry/http/status_page.py) for the filters in its query
// (registry/http/page_view.py), so a view can be linked. This script asks the server again as
// the filters change, swapping in what it renders and putting the filters in the address.
// While instances are listed it follows the watch stream (an opened application's alone),
// patches a row's status the moment a change comes, and re-fetches the page shortly after to
// refresh what events do not carry (new rows, override reasons, lease times, counts, the
// node's health). When the filters match too many instances to list, nothing is watched: a
// fleet's changes never reach the page, and the counts are refreshed every few seconds.
"use strict";

const appFilter = document.getElementById("filter-app");
const statusFilter = document.getElementById("filter-status");
const zoneFilter = document.getElementById("filter-zone");
const POLL_MS = 5000; // the counts' refresh while no instance is listed

function say(text) {
  const message = document.getElementById("message");
  message.textContent = text;
  message.hidden = text === "";
}

function badge(status) {
  const span = document.createElement("span");
  span.className = `status s-${status}`;
  span.textContent = status;
  return span;
}

function rows() {
  const table = document.getElementById("instances");
  return table ? Array.from(table.tBodies[0].rows).filter((r) => r.dataset.id !== undefined) : [];
}

// The page's query for the filters as they are now; an opened application stays open.
function query() {
  const now = new URLSearchParams(location.search);
  const next = new URLSearchParams();
  for (const [name, value] of [
    ["app", appFilter.value.trim()],
    ["status", statusFilter.value],
    ["zone", zoneFilter.value],
    ["open", now.get("open") ?? ""],
  ]) {
    if (value !== "") {
      next.set(name, value);
    }
  }
  const text = next.toString();
  return text === "" ? location.pathname : `?${text}`;
}

// Fetch the page for `target` and swap in its parts; the newest request wins. `filtering`:
// asked for by the filters, and counted as one filtering applied once it is.
let asked = 0;
async function load(target, filtering = false) {
  const mine = ++asked;
  try {
    const response = await fetch(target, { cache: "no-store" });
    if (!response.ok) {
      throw new Error(`${response.status} ${response.statusText}`);
    }
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    if (mine !== asked) {
      return;
    }
    for (const id of ["summary", "view", "recent"]) {
      document.getElementById(id).replaceWith(fresh.getElementById(id));
    }
    const zone = zoneFilter.value; // the zones instances are in now, the chosen one kept
    zoneFilter.replaceChildren(...fresh.getElementById("filter-zone").children);
    zoneFilter.value = zone;
    document.body.dataset.index = fresh.body.dataset.index;
    document.body.dataset.epoch = fresh.body.dataset.epoch;
    say("");
    watch();
    if (filtering) { // filterings applied so far: what tests/bench/page.py waits for
      document.body.dataset.filtered = Number(document.body.dataset.filtered || 0) + 1;
    }
  } catch (error) {
    say(`Could not refresh the page: ${error.message}`);
  }
}

let typing = null;
function filtersChanged() {
  clearTimeout(typing);
  typing = setTimeout(() => {
    const target = query();
    history.replaceState(null, "", target);
    load(target, true);
  }, 30); // a word typed fast is one request
}

// At most one re-fetch a second, however many changes come (a deploy, an eviction sweep).
let refreshing = null;
function refreshSoon() {
  refreshing ??= setTimeout(() => {
    refreshing = null; // a change from now on may be missing from this fetch: it asks again
    load(location.pathname + location.search);
  }, 1000);
}

// The row's status now, as the change event has it; the reason comes with the next refresh.
function patch(row, instance) {
  row.dataset.status = instance.status;
  row.dataset.override = instance.overriddenStatus;
  // The badge only: a server-side check's last result under it stays until the next refresh.
  row.querySelector(".current .status").replaceWith(badge(instance.status));
  const override = row.querySelector(".override");
  if (instance.overriddenStatus === "UNKNOWN") {
    override.replaceChildren();
  } else {
    override.replaceChildren(badge(instance.overriddenStatus));
  }
}

function onChange(event) {
  const change = JSON.parse(event.data);
  if (change.index <= Number(document.body.dataset.index)) {
    return; // in flight as a fresher page came: that page shows it already
  }
  const row = rows().find(
    (r) => r.dataset.app === change.app && r.dataset.id === change.instanceId);
  if (change.action === "DELETED") {
    row?.remove();
  } else if (row) {
    patch(row, change.instance);
  }
  refreshSoon();
}

function setLive(state, text) {
  const live = document.getElementById("live");
  live.className = `live ${state}`;
  live.textContent = text;
}

// What the watch stream follows: "" nothing (no instance listed: the counts are polled),
// an opened application's name, or null for every application (a change anywhere may add a
// row the filters match).
function watched() {
  if (!document.getElementById("instances")) {
    return "";
  }
  return new URLSearchParams(location.search).get("open") ?? null;
}

// Changes from the index the page was rendered at, so none falls between render and connect.
// EventSource reconnects by itself and resumes after the last event it got.
let source = null;
let watching;
let polling = null;
function watch() {
  if (document.body.dataset.watch === "false") {
    setLive("off", "not live: this server's watch stream is off (watch = false)");
    return;
  }
  const apps = watched();
  if (source !== null && apps === watching) {
    return;
  }
  source?.close();
  source = null;
  clearInterval(polling);
  polling = null;
  watching = apps;
  if (apps === "") { // too many instances to list: the counts, every few seconds
    setLive("on", "live (counts every 5 s)");
    polling = setInterval(refreshSoon, POLL_MS);
    return;
  }
  const { index, epoch } = document.body.dataset;
  const only = apps === null ? "" : `&apps=${encodeURIComponent(apps)}`;
  const mine = new EventSource(
    `eureka/watch?index=${index}&epoch=${encodeURIComponent(epoch)}${only}`);
  source = mine;
  mine.addEventListener("open", () => setLive("on", "live"));
  mine.addEventListener("error", () => {
    // CLOSED: the server refused the stream (reads not served yet): only a reload helps.
    if (mine.readyState === EventSource.CLOSED) {
      setLive("off", "not live: reload the page");
    } else {
      setLive("off", "reconnecting…");
    }
  });
  for (const action of ["ADDED", "MODIFIED", "DELETED"]) {
    mine.addEventListener(action, onChange);
  }
  // The node cannot go on from the page's index (forgotten, or another run's): start over.
  mine.addEventListener("reset", () => {
    mine.close();
    location.reload();
  });
}

async function act(button) {
  const row = button.closest("tr");
  const path = `eureka/apps/${encodeURIComponent(row.dataset.app)}/` +
    `${encodeURIComponent(row.dataset.id)}/status`;
  let url = `${path}?value=UP`;
  let method = "DELETE";
  if (button.dataset.action === "take-out") {
    const reason = prompt(`Why take ${row.dataset.id} out of service?`);
    if (reason === null) {
      return; // cancelled
    }
    url = `${path}?value=OUT_OF_SERVICE&reason=${encodeURIComponent(reason)}`;
    method = "PUT";
  }
  button.disabled = true;
  try {
    // Same origin: the browser sends the credentials it signed in with.
    const response = await fetch(url, { method });
    if (response.ok) {
      say(""); // the watch stream brings the change to the row
    } else {
      const body = await response.json().catch(() => ({}));
      say(`${button.textContent} failed for ${row.dataset.id}: ` +
        `${response.status} ${body.detail ?? response.statusText}`);
    }
  } finally {
    button.disabled = false;
  }
}

// Delegated on the page: the tables are replaced on every refresh.
document.querySelector("main").addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (button) {
    act(button);
  }
});
appFilter.addEventListener("input", filtersChanged);
statusFilter.addEventListener("change", filtersChanged);
zoneFilter.addEventListener("change", filtersChanged);
watch();
