// lemoncore's web UI: plain JavaScript, no build step, no third-party code.
//
// Trust boundary: every request is same-origin with a relative URL. A key the server asks
// for (401) is prompted for and kept in `keys` only, in memory: never in localStorage,
// sessionStorage or cookies, so reloading the page forgets it. Model output is escaped
// before the small markdown renderer adds its own tags (renderMarkdown).
"use strict";

const keys = { api: null, admin: null };
// Management routes need the admin key (lemoncore/api/guard.py: ADMIN_ENDPOINTS).
const ADMIN_ROUTE = /\/(load|unload|pull|delete|install|uninstall|logs)(\?|$)/;

const $ = (sel) => document.querySelector(sel);

/** Build an element: el("td", {class: "x"}, "text", child). Text is never parsed as HTML. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k in node && typeof v !== "string") node[k] = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  }
  return node;
}

function notice(message) {
  const box = $("#notice");
  box.textContent = message || "";
  box.hidden = !message;
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// ---------------------------------------------------------------------------------------
// HTTP: keys, errors, event streams

let keyPrompt = null; // one dialog at a time; concurrent 401s share it

function askKey(kind, message) {
  if (keyPrompt) return keyPrompt;
  keyPrompt = new Promise((resolve) => {
    const dialog = $("#key-dialog");
    $("#key-message").textContent = message;
    $("#key-input").value = "";
    $("#key-input").placeholder = kind === "admin" ? "Admin API key" : "API key";
    dialog.addEventListener("close", () => {
      const key = dialog.returnValue === "ok" ? $("#key-input").value.trim() : "";
      $("#key-input").value = "";
      keyPrompt = null;
      resolve(key || null);
    }, { once: true });
    dialog.showModal();
  });
  return keyPrompt;
}

/** fetch() with the key the route needs; on 401 ask for it and retry. */
async function api(path, options = {}) {
  for (;;) {
    const kind = ADMIN_ROUTE.test(path) ? "admin" : "api";
    const key = kind === "admin" ? keys.admin || keys.api : keys.api;
    const headers = { ...(options.headers || {}) };
    if (options.body) headers["Content-Type"] = "application/json";
    if (key) headers.Authorization = `Bearer ${key}`;
    const response = await fetch(path, { ...options, headers, credentials: "omit" });
    if (response.status !== 401) return response;
    const message = (await errorOf(response)) || "This server needs a key.";
    const given = await askKey(kind, message);
    if (!given) throw new Error(message);
    keys[kind] = given;
  }
}

async function errorOf(response) {
  try {
    const body = await response.json();
    return body.error?.message || JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

/** A JSON answer, or an Error carrying the server's message. */
async function getJSON(path, body) {
  const response = await api(path, body === undefined ? {} :
    { method: "POST", body: JSON.stringify(body) });
  if (!response.ok) throw new Error(await errorOf(response));
  return response.json();
}

/** Server-sent events of a fetch() answer: yields {event, data} (POST streams too,
 * which EventSource cannot do). Comments (": ping") are skipped. */
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: data.join("\n") };
    }
  }
}

/** Run a streamed pull or install, showing its progress in `box`; resolves to the
 * `complete` event's data, or throws the `error` event's message. */
async function streamed(path, body, box) {
  const bar = el("progress", { max: 100, value: 0 });
  const label = el("span", { class: "progress-label" }, "starting…");
  box.replaceChildren(el("div", { class: "progress" }, bar, label));
  const response = await api(path, { method: "POST", body: JSON.stringify({ ...body, stream: true }) });
  if (!response.ok) throw new Error(await errorOf(response));
  for await (const { event, data } of events(response)) {
    const value = JSON.parse(data);
    if (event === "progress") {
      bar.value = value.percent;
      label.textContent = `${value.percent.toFixed(1)} % (${bytes(value.bytes_downloaded)} of ${bytes(value.bytes_total)})`;
    } else if (event === "complete") {
      bar.value = 100;
      label.textContent = label.textContent.replace(/^[\d.]+ %/, "100 %").replace("starting…", "100 %") + " · done";
      return value;
    } else if (event === "error") {
      throw new Error(value.error);
    }
  }
  throw new Error("the stream ended without an answer");
}

// ---------------------------------------------------------------------------------------
// Shared state: system-info (recipes, backends, options), models, loaded servers

const state = { info: null, models: [], loaded: new Map(), heldOff: new Map() };

async function refreshInfo() {
  state.info = await getJSON("/api/v1/system-info");
  $("#version").textContent = `v${state.info.version} · ${state.info.os}`;
  const recipes = Object.keys(state.info.recipes);
  const select = $("#add-recipe");
  const chosen = select.value || "llamacpp";
  select.replaceChildren(...recipes.map((r) => el("option", { value: r, selected: r === chosen }, r)));
}

async function refreshModels() {
  const [list, health] = await Promise.all([
    getJSON("/v1/models?show_all=true"), getJSON("/api/v1/health")]);
  state.models = list.data;
  state.loaded = new Map(health.all_models_loaded.map((m) => [m.model_name, m]));
  state.heldOff = new Map((health.held_off ?? []).map((h) => [h.model, h]));
  renderModels();
  renderModelPickers();
}

// ---------------------------------------------------------------------------------------
// Models

const openOptions = new Set(); // models whose options form is open
const pulled = new Map(); // model -> the last progress label of a pull this page made

function renderModels() {
  const words = $("#model-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const onlyDownloaded = $("#model-downloaded").checked;
  const rows = state.models.filter((m) => {
    const text = [m.id, m.recipe, m.checkpoint, ...m.labels, ...m.aliases].join(" ").toLowerCase();
    return words.every((w) => text.includes(w)) && (!onlyDownloaded || m.downloaded);
  });
  $("#model-rows").replaceChildren(...rows.flatMap(modelRows));
}

function modelRows(model) {
  const loaded = state.loaded.get(model.id);
  const held = state.heldOff.get(model.id); // its starts failed: why is in the tooltip
  const status = el("td", {},
    loaded ? el("span", { class: `badge ${loaded.status}` }, `loaded · ${loaded.status}`) : null,
    held ? el("span", { class: "badge error held-off", title: held.reason }, "held off") : null,
    loaded?.pinned ? el("span", { class: "badge pinned" }, "pinned") : null,
    model.downloaded ? el("span", { class: "badge downloaded" }, "downloaded")
      : el("span", { class: "badge" }, "not downloaded"));
  const progress = el("div", { class: "row-progress" });
  if (actionErrors.has(model.id)) progress.append(el("div", { class: "error" }, actionErrors.get(model.id)));
  const act = (label, fn, cls) =>
    el("button", { class: cls, onclick: () => run(fn, progress, model.id) }, label);
  const actions = el("td", { class: "actions", "data-model": model.id });
  if (pulled.has(model.id)) { // the finished pull's bar stays until the page reloads
    progress.append(el("div", { class: "progress" }, el("progress", { max: 100, value: 100 }),
      el("span", { class: "progress-label" }, pulled.get(model.id))));
  }
  if (!model.downloaded) {
    actions.append(el("button", { class: "primary pull", onclick: async () => {
      try {
        await streamed("/api/v1/pull", { model_name: model.id }, progress);
        pulled.set(model.id, progress.querySelector(".progress-label").textContent);
      } catch (err) {
        progress.append(el("div", { class: "error" }, err.message));
        return;
      }
      refreshModels().catch((err) => notice(err.message));
    } }, "Pull"));
  } else if (loaded) {
    actions.append(act("Unload", () => post("/api/v1/unload", { model_name: model.id })),
      act(loaded.pinned ? "Unpin" : "Pin",
        () => post("/api/v1/load", { model_name: model.id, pinned: !loaded.pinned })));
  } else {
    actions.append(act("Load", () => post("/api/v1/load", { model_name: model.id }), "primary load"),
      act("Load pinned", () => post("/api/v1/load", { model_name: model.id, pinned: true })));
  }
  if (model.downloaded) {
    actions.append(el("button", { class: "options-toggle", onclick: () => {
      openOptions.has(model.id) ? openOptions.delete(model.id) : openOptions.add(model.id);
      renderModels();
    } }, "Options…"));
  }
  if (model.deletable) { // a file: or pkg: catalogue model is not lemoncore's to delete
    actions.append(act("Delete", async () => {
      if (confirm(`Delete ${model.id}'s downloaded files?`)) await post("/api/v1/delete", { model_name: model.id });
    }));
  }
  actions.append(progress);
  const backends = model.backends.map((b) => `${b.name}${b.tier === "core" ? "" : ` (${b.tier})`}`).join(", ");
  const row = el("tr", { "data-model": model.id },
    el("td", {}, el("strong", {}, model.id), el("div", { class: "muted" }, model.checkpoint),
      model.labels.length ? el("div", { class: "muted" }, model.labels.join(", ")) : null),
    el("td", {}, model.recipe, el("div", { class: "muted" }, backends)),
    el("td", {}, bytes(model.size_bytes)), status, actions);
  if (!openOptions.has(model.id)) return [row];
  return [row, el("tr", { class: "options-row" }, el("td", { colspan: 5 }, optionsForm(model, progress)))];
}

/** The load form of a model: the recipe's request-scope options (system-info lists their
 * type, bounds and choices), a backend choice and pinning. */
function optionsForm(model, progress) {
  const recipe = state.info?.recipes[model.recipe];
  if (!recipe) return el("p", { class: "muted" }, "recipe not available");
  const fields = recipe.options.filter((o) => o.scope === "request").map((o) => {
    const saved = model.recipe_options[o.name];
    const attrs = { name: o.name, title: o.help, "data-type": o.type };
    let input;
    if (o.choices.length) {
      input = el("select", attrs, el("option", { value: "" }, "(default)"),
        ...o.choices.map((c) => el("option", { value: String(c), selected: saved === c }, String(c))));
    } else if (o.type === "bool") {
      input = el("input", { ...attrs, type: "checkbox", checked: saved ?? o.default ?? false });
      return el("label", { class: "check" }, input, o.name);
    } else if (o.type === "int" || o.type === "float") {
      input = el("input", { ...attrs, type: "number", step: o.type === "int" ? "1" : "any",
        min: o.minimum ?? null, max: o.maximum ?? null,
        placeholder: o.default ?? "", value: saved ?? "" });
    } else {
      const shown = Array.isArray(saved) ? saved.join(", ") : saved;
      input = el("input", { ...attrs, type: "text", value: shown ?? "",
        placeholder: o.type === "args" ? "--flag value (allowed engine flags)" : String(o.default ?? "") });
    }
    return el("label", {}, el("span", {}, o.name, " ", el("span", { class: "muted" }, o.help)), input);
  });
  const usable = Object.entries(recipe.backends).filter(([, b]) => b.state !== "unsupported");
  const backend = el("select", { name: "backend" }, el("option", { value: "" }, "(automatic)"),
    ...usable.map(([name, b]) => el("option", { value: name }, `${name} (${b.state})`)));
  const pinned = el("input", { type: "checkbox", name: "pinned" });
  const form = el("form", { class: "grid options" },
    el("label", {}, "backend", backend), ...fields,
    el("label", { class: "check" }, pinned, "pinned (never evicted)"),
    el("button", { type: "submit", class: "primary" }, "Load with these options"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const body = { model_name: model.id, pinned: pinned.checked };
    if (backend.value) body.backend = backend.value;
    for (const input of form.querySelectorAll("[data-type]")) {
      const type = input.dataset.type;
      if (type === "bool") { body[input.name] = input.checked; continue; }
      if (input.value === "") continue;
      body[input.name] = type === "int" ? parseInt(input.value, 10)
        : type === "float" ? parseFloat(input.value)
        : type === "list" ? input.value.split(",").map((s) => s.trim()).filter(Boolean)
        : input.value;
    }
    run(() => post("/api/v1/load", body), progress, model.id);
  });
  return form;
}

/** A management call: show what it is doing and its error, then refresh the lists. */
async function post(path, body) {
  await getJSON(path, body);
}

// The last failed action's error per model, shown in its row until its next action:
// the table re-renders after every action, so an error kept only in the DOM would vanish.
const actionErrors = new Map();

async function run(action, box, model) {
  actionErrors.delete(model);
  box.replaceChildren(el("span", { class: "muted" }, "working…"));
  try {
    await action();
    box.replaceChildren();
  } catch (err) {
    actionErrors.set(model, err.message);
    box.replaceChildren(el("div", { class: "error" }, err.message));
  } finally {
    refreshModels().catch((err) => notice(err.message));
  }
}

$("#add-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = new FormData(e.target);
  const labels = String(form.get("labels") || "").split(",").map((s) => s.trim()).filter(Boolean);
  const box = $("#add-progress");
  try {
    await streamed("/api/v1/pull", { model_name: form.get("model_name"),
      checkpoint: form.get("checkpoint"), recipe: form.get("recipe"),
      ...(labels.length ? { labels } : {}) }, box);
    await refreshModels();
  } catch (err) {
    box.append(el("div", { class: "error" }, err.message));
  }
});
$("#model-filter").addEventListener("input", renderModels);
$("#model-downloaded").addEventListener("change", renderModels);
$("#models-refresh").addEventListener("click", () => refreshAll());

// ---------------------------------------------------------------------------------------
// Backends

function renderBackends() {
  if (!state.info) return;
  const hide = $("#hide-unsupported").checked;
  const rows = [];
  for (const [recipe, info] of Object.entries(state.info.recipes)) {
    for (const [name, b] of Object.entries(info.backends)) {
      if (hide && b.state === "unsupported") continue;
      rows.push(backendRow(`${recipe}:${name}`, b));
    }
  }
  $("#backend-rows").replaceChildren(...rows);
}

function backendRow(id, b) {
  const progress = el("div");
  const actions = el("td", { class: "actions" });
  const install = async () => {
    let consent = false;
    if (b.tier === "experimental") {
      consent = await askConsent(id, b.description);
      if (!consent) return;
    }
    try {
      await streamed("/api/v1/install", { backend: id, ...(consent ? { consent } : {}) }, progress);
      await refreshInfo();
      renderBackends();
    } catch (err) {
      progress.replaceChildren(el("div", { class: "error" }, err.message));
    }
  };
  if (b.state === "installable" || b.state === "update_required") {
    actions.append(el("button", { class: "primary", onclick: install },
      b.state === "update_required" ? "Update" : "Install"));
  }
  if (b.state === "installed" || b.state === "update_required") {
    actions.append(el("button", { onclick: async () => {
      try {
        await getJSON("/api/v1/uninstall", { backend: id });
        await refreshInfo();
        renderBackends();
      } catch (err) {
        progress.replaceChildren(el("div", { class: "error" }, err.message));
      }
    } }, "Uninstall"));
  }
  actions.append(progress);
  return el("tr", { class: b.state, "data-backend": id },
    el("td", {}, el("strong", {}, id), el("div", { class: "muted" }, b.description)),
    el("td", {}, el("span", { class: `badge ${b.state}` }, b.state.replace("_", " "))),
    el("td", {}, el("span", { class: `badge ${b.tier}` }, b.tier)),
    el("td", {}, b.format),
    el("td", {}, b.devices.join(", ")),
    el("td", { class: "message" }, b.message,
      b.action ? el("code", { class: "fix" }, b.action) : null),
    actions);
}

function askConsent(id, description) {
  return new Promise((resolve) => {
    const dialog = $("#consent-dialog");
    $("#consent-name").textContent = id;
    $("#consent-description").textContent = description;
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

$("#hide-unsupported").addEventListener("change", renderBackends);
$("#backends-refresh").addEventListener("click", async () => {
  try { await refreshInfo(); renderBackends(); } catch (err) { notice(err.message); }
});

// ---------------------------------------------------------------------------------------
// Chat

const chat = { messages: [], controller: null, picked: false };

function renderModelPickers() {
  const usable = state.models.filter((m) => m.downloaded || state.loaded.has(m.id));
  const chats = usable.filter((m) => m.model_type === "llm"); // what /v1/chat/completions takes
  for (const [sel, all] of [["#chat-model", false], ["#log-model", true]]) {
    const select = $(sel);
    const listed = all ? usable : chats;
    // Until the user picks a chat model, default to a loaded one.
    const loadedChat = chats.find((m) => state.loaded.has(m.id));
    const chosen = all || chat.picked ? select.value : loadedChat?.id || select.value;
    const options = listed.map((m) => el("option", { value: m.id, selected: m.id === chosen }, m.id));
    select.replaceChildren(...(all ? [el("option", { value: "" }, "all")] : []), ...options);
  }
}
$("#chat-model").addEventListener("change", () => { chat.picked = true; });

/** Markdown, safely: the text is HTML-escaped first, then a few constructs get tags of
 * ours (fenced and inline code, headings, lists, bold, italics, http(s) links). */
function renderMarkdown(text) {
  const escape = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
  const inline = (s) => s
    .replace(/`([^`\n]+)`/g, "<code>$1</code>")
    .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>")
    .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g,
      '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  const parts = text.split(/^```[^\n]*\n?/m); // odd parts are inside a fence
  return parts.map((part, i) => {
    if (i % 2) return `<pre><code>${escape(part.replace(/\n$/, ""))}</code></pre>`;
    let html = "", list = null;
    const close = () => { if (list) { html += `</${list}>`; list = null; } };
    for (const raw of escape(part).split("\n")) {
      let m;
      if ((m = raw.match(/^(#{1,6})\s+(.*)$/))) {
        close();
        const level = Math.min(m[1].length + 2, 6); // h3..h6 inside a message
        html += `<h${level}>${inline(m[2])}</h${level}>`;
      } else if ((m = raw.match(/^\s*(?:[-*+]|(\d+)\.)\s+(.*)$/))) {
        const kind = m[1] ? "ol" : "ul";
        if (list !== kind) { close(); html += `<${kind}>`; list = kind; }
        html += `<li>${inline(m[2])}</li>`;
      } else if (raw.trim() === "") {
        close();
      } else {
        close();
        html += `<p>${inline(raw)}</p>`;
      }
    }
    close();
    return html;
  }).join("");
}

function addMessage(role, text) {
  const body = el("div", { class: "body" });
  if (role === "user") body.textContent = text; else body.innerHTML = renderMarkdown(text);
  const meta = el("div", { class: "meta" });
  const node = el("div", { class: `msg ${role}` }, el("div", { class: "who" }, role), body, meta);
  $("#chat-log").append(node);
  $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
  return { body, meta };
}

async function send(text) {
  const model = $("#chat-model").value;
  if (!model) { notice("Choose a model (pull one on the Models tab first)."); return; }
  notice("");
  chat.messages.push({ role: "user", content: text });
  addMessage("user", text);
  const view = addMessage("assistant", "");
  view.meta.textContent = "waiting for the model (it loads on first use)…";
  const controller = new AbortController();
  chat.controller = controller;
  $("#chat-send").disabled = true;
  $("#chat-stop").disabled = false;
  let answer = "", usage = null, first = null, stopped = false, speed = null;
  const started = performance.now();
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST", signal: controller.signal, body: JSON.stringify({
        model, messages: chat.messages, stream: true, stream_options: { include_usage: true } }) });
    if (!response.ok) throw new Error(await errorOf(response));
    view.meta.textContent = "";
    for await (const { data } of events(response)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
      if (chunk.usage) usage = chunk.usage;
      if (chunk.timings?.predicted_per_second) speed = chunk.timings.predicted_per_second;
      const delta = chunk.choices?.[0]?.delta ?? {};
      if (delta.content || delta.reasoning_content) first ??= performance.now();
      if (delta.content) {
        answer += delta.content;
        view.body.innerHTML = renderMarkdown(answer);
        $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
      }
    }
  } catch (err) {
    if (err.name === "AbortError") stopped = true;
    else view.body.append(el("div", { class: "error" }, err.message));
  } finally {
    chat.controller = null;
    $("#chat-send").disabled = false;
    $("#chat-stop").disabled = true;
  }
  if (answer) chat.messages.push({ role: "assistant", content: answer });
  const seconds = ((first ? performance.now() - first : 0) || 1) / 1000;
  const tokens = usage?.completion_tokens;
  const stats = stopped ? "stopped" : tokens !== undefined
    // The engine's own generation speed when it reports one (llama-server's `timings`),
    // else tokens over the time from the first token to the last.
    ? `${tokens} tokens · ${(speed ?? tokens / seconds).toFixed(1)} tokens/s · ${((performance.now() - started) / 1000).toFixed(1)} s`
    : "";
  view.meta.textContent = stats;
  view.meta.classList.add("stats");
  $("#chat-stats").textContent = stats;
}

$("#chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("#chat-input").value.trim();
  if (!text || chat.controller) return;
  $("#chat-input").value = "";
  send(text);
});
$("#chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("#chat-form").requestSubmit(); }
});
// Aborting the fetch closes the connection; lemoncore then closes the backend's.
$("#chat-stop").addEventListener("click", () => chat.controller?.abort());
$("#chat-clear").addEventListener("click", () => {
  chat.controller?.abort();
  chat.messages = [];
  $("#chat-log").replaceChildren();
  $("#chat-stats").textContent = "";
});

// ---------------------------------------------------------------------------------------
// Logs: GET /api/v1/logs?follow=true, an event stream of `line` events

const logs = { controller: null, last: 0, shown: 0 };
const MAX_LOG_LINES = 2000;

function stopLogs() {
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

$("#log-model").addEventListener("change", restartLogs);
$("#log-follow").addEventListener("change", () => $("#log-follow").checked ? followLogs() : stopLogs());
$("#log-clear").addEventListener("click", () => { $("#log-lines").replaceChildren(); logs.shown = 0; });

// ---------------------------------------------------------------------------------------
// Status: health (loaded and held-off models), eviction counts (/metrics) and recent
// evictions (the log's `evicting`)

async function refreshStatus() {
  const [health, metrics, evictions] = await Promise.all([
    getJSON("/api/v1/health"),
    api("/metrics").then((r) => (r.ok ? r.text() : "")),
    getJSON("/api/v1/logs?event=evicting&limit=50").catch((err) => ({ data: [], error: err.message })),
  ]);
  $("#status-summary").textContent = `version ${health.version} · most recently used: ${health.model_loaded ?? "none"}`;
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
  const counts = [...metrics.matchAll(/^lemon_evictions_total\{reason="([^"]*)"\} (\d+)/gm)]
    .map((m) => `${m[1]}: ${m[2]}`);
  $("#eviction-counts").textContent = counts.length ? `Since the server started — ${counts.join(", ")}` : "No evictions since the server started.";
  $("#eviction-rows").replaceChildren(...evictions.data.slice().reverse().map((e) => el("tr", { class: "eviction" },
    el("td", {}, e.time.replace("T", " ").replace(/\.\d+Z$/, "Z")), el("td", {}, e.model ?? ""),
    el("td", {}, el("span", { class: "badge" }, e.fields.kind ?? "")), el("td", { class: "reason" }, e.fields.reason ?? ""))));
  if (evictions.error) $("#eviction-rows").replaceChildren(el("tr", {}, el("td", { colspan: 4, class: "muted" }, evictions.error)));
}

$("#status-refresh").addEventListener("click", () => refreshStatus().catch((err) => notice(err.message)));

// ---------------------------------------------------------------------------------------
// Tabs and start-up

let current = "models";
let statusTimer = null;

function show(tab) {
  current = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll("section.tab")) s.hidden = s.id !== tab;
  clearInterval(statusTimer);
  if (tab !== "logs") stopLogs();
  const fail = (err) => notice(err.message);
  if (tab === "models") refreshModels().catch(fail);
  if (tab === "backends") refreshInfo().then(renderBackends).catch(fail);
  if (tab === "chat") { refreshModels().catch(fail); $("#chat-input").focus(); }
  if (tab === "logs" && !logs.controller) restartLogs();
  if (tab === "status") {
    refreshStatus().catch(fail);
    statusTimer = setInterval(() => refreshStatus().catch(fail), 3000);
  }
  if (location.hash !== `#${tab}`) history.replaceState(null, "", `#${tab}`);
}

async function refreshAll() {
  try {
    notice("");
    await refreshInfo();
    await refreshModels();
    renderBackends();
  } catch (err) {
    notice(err.message);
  }
}

for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => show(b.dataset.tab));
window.lemonUI = { renderMarkdown, show }; // for tests and the console
refreshAll().then(() => show(location.hash.slice(1) || "models"));
