// The Logs tab: GET /api/v1/logs?follow=true, an event stream of `line` events, for
// every model or one.

import { $, api, el, errorOf, events } from "./app.js";
import { onModels, state } from "./state.js";

const logs = { controller: null, last: 0, shown: 0 };
const MAX_LOG_LINES = 2000;

export function stopLogs() {
  logs.controller?.abort();
  logs.controller = null;
}

async function followLogs() {
  stopLogs();
  const controller = new AbortController();
  logs.controller = controller;
  const model = $("#log-model").value;
  const follow = $("#log-follow").checked;
  const query = new URLSearchParams({ limit: "1000", follow: String(follow) });
  if (model) query.set("model", model);
  if (logs.last) query.set("after", String(logs.last));
  const pre = $("#log-lines");
  const append = (line) => {
    logs.last = Math.max(logs.last, line.seq);
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(el("div", { class: `${line.source} ${line.level}`, "data-seq": line.seq }, line.line));
    if (++logs.shown > MAX_LOG_LINES) { pre.firstChild.remove(); logs.shown--; }
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  };
  try {
    const response = await api(`/api/v1/logs?${query}`, { signal: controller.signal });
    if (!response.ok) throw new Error(await errorOf(response));
    if (!follow) {
      const body = await response.json();
      body.data.forEach(append);
      $("#log-state").textContent = `${body.data.length} lines`;
      return;
    }
    $("#log-state").textContent = "following";
    for await (const { event, data } of events(response)) {
      if (event === "line") append(JSON.parse(data));
    }
    $("#log-state").textContent = "the stream ended (the server stopped, or its log is not kept)";
  } catch (err) {
    if (err.name !== "AbortError") $("#log-state").textContent = err.message;
  }
}

function restartLogs() {
  $("#log-lines").replaceChildren();
  logs.last = 0;
  logs.shown = 0;
  followLogs();
}

/** The model picker: "all", and every model downloaded or loaded. */
function renderPicker() {
  const select = $("#log-model");
  const chosen = select.value;
  const listed = state.models.filter((m) => m.downloaded || state.loaded.has(m.id));
  select.replaceChildren(el("option", { value: "" }, "all"),
    ...listed.map((m) => el("option", { value: m.id, selected: m.id === chosen }, m.id)));
}
onModels(renderPicker);

/** The tab opened: follow the log, unless it already is. */
export function showLogs() {
  if (!logs.controller) restartLogs();
}

$("#log-model").addEventListener("change", restartLogs);
$("#log-follow").addEventListener("change", () => $("#log-follow").checked ? followLogs() : stopLogs());
$("#log-clear").addEventListener("click", () => { $("#log-lines").replaceChildren(); logs.shown = 0; });

