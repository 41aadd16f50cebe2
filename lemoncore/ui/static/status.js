// The Status tab: the loaded models (health), those held off after failed starts, counts
// since the start (evictions and unloads from /metrics, crashes from the events), and the
// recent model events (GET /api/v1/events): loads, unloads and why, crashes, failed starts.

import { $, api, bytes, el, getJSON } from "./app.js";

const UNLOADS = { unload: "asked", idle: "idle" }; // the unloads that are no eviction
const FAILURES = new Set(["crashed", "load_failed"]);

/** An event of /api/v1/events in a user's words: "unloaded (asked)", "evicted (lru)",
 * "crashed", "load failed", "loaded". */
export function describeEvent(e) {
  if (e.event !== "unloaded") return e.event.replace("_", " ");
  return e.kind in UNLOADS ? `unloaded (${UNLOADS[e.kind]})` : `evicted (${e.kind})`;
}

function eventRow(e) {
  const failed = FAILURES.has(e.event);
  return el("tr", { class: `event ${e.event}`, "data-model": e.model },
    el("td", { class: "nowrap" }, e.time.replace("T", " ").replace(/\.\d+Z$/, "Z")),
    el("td", { class: "nowrap" }, e.model),
    el("td", {}, el("span", { class: failed ? "badge error" : "badge" }, describeEvent(e))),
    el("td", { class: "reason message" }, e.reason));
}

/** "a: 1, b: 2" of the [name, count] pairs whose count is not 0; "" when none is. */
function listed(pairs) {
  return pairs.filter(([, n]) => Number(n) > 0).map(([name, n]) => `${name}: ${n}`).join(", ");
}

function renderCounts(metrics, crashes) {
  const stops = [...metrics.matchAll(/^lemon_evictions_total\{reason="([^"]*)"\} (\d+)/gm)]
    .map((m) => [m[1], m[2]]);
  const evicted = listed(stops.filter(([kind]) => !(kind in UNLOADS)));
  const unloaded = listed(stops.filter(([kind]) => kind in UNLOADS).map(([k, n]) => [UNLOADS[k], n]));
  $("#eviction-counts").textContent = (evicted ? `Evictions since the server started — ${evicted}.`
    : "No evictions since the server started.") + (unloaded ? ` Unloads — ${unloaded}.` : "");
  const crashed = listed(Object.entries(crashes));
  $("#crash-counts").textContent = crashed ? `Crashes since start — ${crashed}.` : "No crashes since start.";
  $("#crash-counts").classList.toggle("error", !!crashed);
}

function renderLoaded(health) {
  $("#loaded-rows").replaceChildren(...health.all_models_loaded.map((m) => el("tr", { "data-model": m.model_name },
    el("td", {}, el("strong", {}, m.model_name)), el("td", {}, `${m.recipe}:${m.backend}`),
    el("td", {}, m.device), el("td", {}, el("span", { class: `badge ${m.status}` }, m.status)),
    el("td", {}, m.pinned ? "yes" : "no"), el("td", {}, `${m.in_flight} / ${m.queued}`),
    el("td", {}, bytes(m.peak_memory_bytes) || "—"), el("td", {}, m.pid ?? "—"))));
  if (!health.all_models_loaded.length) {
    $("#loaded-rows").replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no model is loaded")));
  }
  // Held off after failed starts; the reason is the engine's story (its output): text only.
  const held = health.held_off ?? [];
  $("#held-off").hidden = !held.length;
  $("#held-rows").replaceChildren(...held.map((h) => el("tr", { "data-model": h.model },
    el("td", {}, el("strong", {}, h.model)), el("td", { class: "message" }, h.reason),
    el("td", {}, h.failures), el("td", {}, `${Math.max(1, Math.round(h.retry_in_s))} s`))));
}

export async function refreshStatus() {
  const [health, metrics, history] = await Promise.all([
    getJSON("/api/v1/health"),
    api("/metrics").then((r) => (r.ok ? r.text() : "")),
    getJSON("/api/v1/events?limit=50").catch((err) => ({ data: [], crashes: {}, error: err.message })),
  ]);
  $("#status-summary").textContent = `version ${health.version} · most recently used: ${health.model_loaded ?? "none"}`;
  renderLoaded(health);
  renderCounts(metrics, history.crashes ?? {});
  $("#event-rows").replaceChildren(...history.data.slice().reverse().map(eventRow)); // newest first
  if (history.error) {
    $("#event-rows").replaceChildren(el("tr", {}, el("td", { colspan: 4, class: "error" }, history.error)));
  } else if (!history.data.length) {
    $("#event-rows").replaceChildren(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "nothing yet")));
  }
}
