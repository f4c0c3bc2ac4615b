// The status page's behaviour: filters, live updates, admin actions. No framework, no build.
//
// The server renders the page (registry/http/status_page.py). This script filters its rows,
// patches a row's status the moment the watch stream reports a change, and re-fetches the page
// shortly after to refresh what events do not carry: new rows, override reasons, lease times
// and the node's health.
"use strict";

const table = document.getElementById("instances");
const appFilter = document.getElementById("filter-app");
const statusFilter = document.getElementById("filter-status");

function rows() {
  return Array.from(table.tBodies[0].rows).filter((row) => row.dataset.id !== undefined);
}

function applyFilters() {
  const text = appFilter.value.trim().toUpperCase();
  const status = statusFilter.value;
  const all = rows();
  let shown = 0;
  for (const row of all) {
    row.hidden = !(row.dataset.app.toUpperCase().includes(text) &&
      (status === "" || row.dataset.status === status));
    shown += row.hidden ? 0 : 1;
  }
  document.getElementById("shown").textContent = `${shown} of ${all.length} shown`;
}

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

// At most one re-fetch a second, however many changes come (a deploy, an eviction sweep).
let refreshing = null;
function refreshSoon() {
  refreshing ??= setTimeout(refresh, 1000);
}

async function refresh() {
  refreshing = null; // a change from now on may be missing from this fetch: it asks again
  try {
    const response = await fetch(location.pathname, { cache: "no-store" });
    if (!response.ok) {
      throw new Error(`${response.status} ${response.statusText}`);
    }
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    document.getElementById("summary").replaceWith(fresh.getElementById("summary"));
    table.tBodies[0].replaceWith(fresh.getElementById("instances").tBodies[0]);
    applyFilters();
  } catch (error) {
    say(`Could not refresh the page: ${error.message}`);
  }
}

function onChange(event) {
  const change = JSON.parse(event.data);
  const row = rows().find(
    (r) => r.dataset.app === change.app && r.dataset.id === change.instanceId);
  if (change.action === "DELETED") {
    row?.remove();
  } else if (row) {
    patch(row, change.instance);
  }
  applyFilters();
  refreshSoon();
}

function setLive(state, text) {
  const live = document.getElementById("live");
  live.className = `live ${state}`;
  live.textContent = text;
}

// Changes from the index the page was rendered at, so none falls between render and connect.
// EventSource reconnects by itself and resumes after the last event it got.
function watch() {
  const { index, epoch } = document.body.dataset;
  if (document.body.dataset.watch === "false") {
    setLive("off", "not live: this server's watch stream is off (watch = false)");
    return;
  }
  const source = new EventSource(
    `eureka/watch?index=${index}&epoch=${encodeURIComponent(epoch)}`);
  source.addEventListener("open", () => setLive("on", "live"));
  source.addEventListener("error", () => {
    // CLOSED: the server refused the stream (reads not served yet): only a reload helps.
    if (source.readyState === EventSource.CLOSED) {
      setLive("off", "not live: reload the page");
    } else {
      setLive("off", "reconnecting…");
    }
  });
  for (const action of ["ADDED", "MODIFIED", "DELETED"]) {
    source.addEventListener(action, onChange);
  }
  // The node cannot go on from the page's index (forgotten, or another run's): start over.
  source.addEventListener("reset", () => {
    source.close();
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

// Delegated on the table: its body is replaced on every refresh.
table.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (button) {
    act(button);
  }
});
appFilter.addEventListener("input", applyFilters);
statusFilter.addEventListener("change", applyFilters);
applyFilters();
watch();
