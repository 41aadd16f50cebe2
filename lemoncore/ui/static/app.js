// lemoncore's web UI: plain JavaScript modules, no build step, no third-party code. This
// one holds what every tab uses: building elements, the notice, sizes, and HTTP (keys,
// errors, event streams); main.js starts the page.
//
// Trust boundary: every request is same-origin with a relative URL. A key the server asks
// for (401) is prompted for and kept in `keys` only, in memory: never in localStorage,
// sessionStorage or cookies, so reloading the page forgets it. Model output is escaped
// before the small markdown renderer adds its own tags (markdown.js).

const keys = { api: null, admin: null };
// Management routes need the admin key (lemoncore/api/guard.py: ADMIN_ENDPOINTS).
const ADMIN_ROUTE = /\/(load|unload|pull|register|delete|install|uninstall|logs|events|shutdown)(\?|$)/;

export const $ = (sel) => document.querySelector(sel);

/** Build an element: el("td", {class: "x"}, "text", child). Text is never parsed as HTML. */
export function el(tag, attrs = {}, ...children) {
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

export function notice(message) {
  const box = $("#notice");
  box.textContent = message || "";
  box.hidden = !message;
}

/** A size in binary units, as the CLI writes them ("512 B", "1.5 KiB", "270.6 MiB");
 * "" when unknown. */
export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
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
export async function api(path, options = {}) {
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

export async function errorOf(response) {
  try {
    const body = await response.json();
    return body.error?.message || JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

/** A JSON answer, or an Error carrying the server's message. */
export async function getJSON(path, body) {
  const response = await api(path, body === undefined ? {} :
    { method: "POST", body: JSON.stringify(body) });
  if (!response.ok) throw new Error(await errorOf(response));
  return response.json();
}

/** Server-sent events of a fetch() answer: yields {event, data} (POST streams too,
 * which EventSource cannot do). Comments (": ping") are skipped. */
export async function* events(response) {
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
 * `complete` event's data, or throws the error, which the bar's label then shows. */
export async function streamed(path, body, box) {
  const bar = el("progress", { max: 100, value: 0 });
  const label = el("span", { class: "progress-label" }, "starting…");
  box.replaceChildren(el("div", { class: "progress" }, bar, label));
  try {
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
  } catch (err) {
    bar.hidden = true;
    label.textContent = `failed: ${err.message}`;
    label.classList.add("error");
    throw err;
  }
}
