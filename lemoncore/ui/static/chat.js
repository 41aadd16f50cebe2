// The Chat tab: streamed answers from /v1/chat/completions, with a system prompt and
// sampling settings, reasoning shown collapsed, regenerate, copy and edit, and the
// conversations kept in the browser (conversations.js).
//
// A conversation's model is its own: set when the user picks one or sends the first
// message, stored with it, and never changed by what gets loaded or evicted elsewhere.
// Until then an empty conversation shows a loaded chat model.

import { $, api, el, errorOf, events, notice } from "./app.js";
import { loadConversations, newConversation, saveConversations, titleOf } from "./conversations.js";
import { renderMarkdown } from "./markdown.js";
import { onModels, state } from "./state.js";

const chat = { list: loadConversations(), current: newConversation(), controller: null };
// The sampling fields: their input, the body's key, and how their text becomes a number.
const SAMPLING = [
  ["#chat-temperature", "temperature", parseFloat],
  ["#chat-top-p", "top_p", parseFloat],
  ["#chat-max-tokens", "max_tokens", (s) => parseInt(s, 10)],
];

function save() {
  const conv = chat.current;
  if (conv.messages.length && !chat.list.includes(conv)) chat.list.unshift(conv);
  try {
    saveConversations(chat.list);
  } catch (err) {
    notice(`This browser did not keep the conversations: ${err.message}`);
  }
  renderList();
}

// ---------------------------------------------------------------------------------------
// The conversation list, the model picker and the settings

function renderList() {
  $("#conversation-list").replaceChildren(...chat.list.map((c) => el("li",
    { class: c === chat.current ? "conversation current" : "conversation", "data-id": c.id },
    el("button", { class: "open", title: c.model, onclick: () => switchTo(c) }, titleOf(c)),
    el("button", { class: "delete", title: "Delete this conversation", "aria-label": "Delete",
      onclick: () => remove(c) }, "×"))));
}

function switchTo(conversation) {
  chat.controller?.abort();
  chat.current = conversation;
  $("#chat-stats").textContent = "";
  renderPicker();
  renderSettings();
  renderLog();
  renderList();
}

function remove(conversation) {
  chat.list = chat.list.filter((c) => c !== conversation);
  save();
  if (conversation === chat.current) switchTo(newConversation());
}

/** The chat models (downloaded or loaded, of type llm: what the route takes), and the
 * conversation's own even when it is not among them. */
function renderPicker() {
  const conv = chat.current;
  const chats = state.models.filter((m) => m.model_type === "llm" && (m.downloaded || state.loaded.has(m.id)));
  const names = chats.map((m) => m.id);
  const chosen = conv.model || chats.find((m) => state.loaded.has(m.id))?.id || $("#chat-model").value;
  if (conv.model && !names.includes(conv.model)) names.push(conv.model);
  $("#chat-model").replaceChildren(...names.map((name) => el("option", { value: name, selected: name === chosen },
    chats.some((m) => m.id === name) ? name : `${name} (not available here now)`)));
}
onModels(renderPicker);
$("#chat-model").addEventListener("change", () => {
  chat.current.model = $("#chat-model").value;
  if (chat.current.messages.length) save();
});

function renderSettings() {
  $("#chat-system").value = chat.current.system;
  for (const [sel, key] of SAMPLING) $(sel).value = chat.current.sampling[key];
}
$("#chat-system").addEventListener("input", () => { chat.current.system = $("#chat-system").value; });
for (const [sel, key] of SAMPLING) {
  $(sel).addEventListener("input", () => { chat.current.sampling[key] = $(sel).value; });
}
$("#chat-settings").addEventListener("change", () => { if (chat.current.messages.length) save(); });

/** The sampling fields that are set, as the request's body takes them; throws with what
 * to fix when one is out of its range. */
function sampling() {
  const body = {};
  for (const [sel, key, parse] of SAMPLING) {
    const input = $(sel);
    if (!input.checkValidity()) {
      throw new Error(`${input.labels[0].textContent.trim()}: ${input.validationMessage}`);
    }
    if (input.value !== "") body[key] = parse(input.value);
  }
  return body;
}

// ---------------------------------------------------------------------------------------
// Messages

/** A message's element: its text (markdown for answers, plain for questions), its
 * reasoning in a closed <details>, its stats, and its buttons. */
function messageView(message, index) {
  const body = el("div", { class: "body" });
  if (message.role === "user") body.textContent = message.content;
  else body.innerHTML = renderMarkdown(message.content);
  const thought = el("div", { class: "thought" }, message.reasoning ?? "");
  const reasoning = el("details", { class: "reasoning", hidden: !message.reasoning },
    el("summary", {}, "Reasoning"), thought);
  const meta = el("div", { class: message.stats ? "meta stats" : "meta" }, message.stats ?? "");
  const tools = el("div", { class: "tools" });
  const node = el("div", { class: `msg ${message.role}`, "data-index": index },
    el("div", { class: "who" }, message.role), reasoning, body, meta, tools);
  return { node, body, reasoning, thought, meta, tools };
}

function renderLog() {
  const messages = chat.current.messages;
  const views = messages.map((message, i) => {
    const view = messageView(message, i);
    if (message.role === "user") {
      view.tools.append(el("button", { class: "edit", onclick: () => edit(i, view) }, "Edit"));
    } else {
      const copy = el("button", { class: "copy", onclick: async () => {
        copy.textContent = (await copyText(message.content)) ? "Copied" : "Copy failed";
      } }, "Copy");
      view.tools.append(copy);
      if (i === messages.length - 1) {
        view.tools.append(el("button", { class: "regenerate", onclick: regenerate }, "Regenerate"));
      }
    }
    return view.node;
  });
  $("#chat-log").replaceChildren(...views);
  $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch { // no clipboard API (an http:// address that is not this machine's)
    const area = el("textarea", { class: "offscreen" });
    area.value = text;
    document.body.append(area);
    area.select();
    const done = document.execCommand("copy");
    area.remove();
    return done;
  }
}

/** Edit question `index` in place; sending it drops what followed and asks again. */
function edit(index, view) {
  const text = el("textarea", { class: "edit-text", rows: 3 });
  text.value = chat.current.messages[index].content;
  const send = el("button", { class: "primary send-edit", onclick: () => {
    const content = text.value.trim();
    if (!content) return;
    askWith(() => {
      chat.current.messages = [...chat.current.messages.slice(0, index), { role: "user", content }];
    });
  } }, "Send");
  view.body.replaceChildren(text, el("div", { class: "buttons" }, send,
    el("button", { onclick: renderLog }, "Cancel")));
  view.tools.replaceChildren();
  text.focus();
}

function regenerate() {
  askWith(() => { if (chat.current.messages.at(-1)?.role === "assistant") chat.current.messages.pop(); });
}

/** Ask `text` in the current conversation; false when it was not asked (see askWith, or
 * no model to ask). */
function ask(text) {
  const conv = chat.current;
  conv.model ||= $("#chat-model").value;
  if (!conv.model) {
    notice("Choose a model: pull one on the Models tab (or run `lemon pull MODEL`) first.");
    return false;
  }
  return askWith(() => {
    conv.messages.push({ role: "user", content: text });
    conv.updated = Date.now();
    save(); // listed (and kept) from its first question on
  });
}

/** Change the conversation's messages with `change`, then stream the answer; unless
 * an answer is streaming, or a sampling field is out of range (the notice says which
 * and why; nothing changes then). True when it asked. */
function askWith(change) {
  if (chat.controller) return false;
  let settings;
  try {
    settings = sampling();
  } catch (err) {
    notice(err.message);
    return false;
  }
  change();
  renderLog();
  complete(settings);
  return true;
}

/** Stream the answer to the conversation's messages; the answer (and its reasoning) is
 * added to the conversation, a stopped one too, and the conversation saved. */
async function complete(settings) {
  const conv = chat.current;
  const view = messageView({ role: "assistant", content: "" }, conv.messages.length);
  $("#chat-log").append(view.node);
  const body = { model: conv.model, ...settings, stream: true, stream_options: { include_usage: true },
    messages: [...(conv.system.trim() ? [{ role: "system", content: conv.system }] : []),
      ...conv.messages.map(({ role, content }) => ({ role, content }))] };
  notice("");
  view.meta.textContent = "waiting for the model (it loads on first use)…";
  const controller = new AbortController();
  chat.controller = controller;
  $("#chat-send").disabled = true;
  $("#chat-stop").disabled = false;
  let answer = "", reasoning = "", usage = null, first = null, stopped = false, speed = null, failed = false;
  const started = performance.now();
  try {
    const response = await api("/v1/chat/completions", {
      method: "POST", signal: controller.signal, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(await errorOf(response));
    view.meta.textContent = "";
    for await (const { data } of events(response)) {
      if (data === "[DONE]") break;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || JSON.stringify(chunk.error));
      if (chunk.usage) usage = chunk.usage;
      if (chunk.timings?.predicted_per_second) speed = chunk.timings.predicted_per_second;
      const choice = chunk.choices?.[0];
      const part = choice?.delta ?? choice?.message ?? {}; // a stream's delta, or a whole answer
      if (part.content || part.reasoning_content) first ??= performance.now();
      if (part.reasoning_content) {
        reasoning += part.reasoning_content;
        view.thought.textContent = reasoning;
        view.reasoning.hidden = false;
      }
      if (part.content) {
        answer += part.content;
        view.body.innerHTML = renderMarkdown(answer);
      }
      $("#chat-log").scrollTop = $("#chat-log").scrollHeight;
    }
  } catch (err) {
    if (err.name === "AbortError") stopped = true;
    else {
      failed = true;
      view.body.append(el("div", { class: "error" }, err.message));
    }
  } finally {
    chat.controller = null;
    $("#chat-send").disabled = false;
    $("#chat-stop").disabled = true;
  }
  const seconds = ((first ? performance.now() - first : 0) || 1) / 1000;
  const tokens = usage?.completion_tokens;
  const stats = stopped ? "stopped" : tokens !== undefined
    // The engine's own generation speed when it reports one (llama-server's `timings`),
    // else tokens over the time from the first token to the last.
    ? `${tokens} tokens · ${(speed ?? tokens / seconds).toFixed(1)} tokens/s · ${((performance.now() - started) / 1000).toFixed(1)} s`
    : "";
  if (answer || reasoning) {
    conv.messages.push({ role: "assistant", content: answer, ...(reasoning ? { reasoning } : {}), stats });
  }
  conv.updated = Date.now();
  save();
  if (conv !== chat.current) return;
  $("#chat-stats").textContent = stats;
  if (!failed) renderLog();
  else view.tools.append(el("button", { class: "regenerate", onclick: regenerate }, "Retry"));
}

$("#chat-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("#chat-input").value.trim();
  if (text && ask(text)) $("#chat-input").value = "";
});
$("#chat-input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("#chat-form").requestSubmit(); }
});
// Aborting the fetch closes the connection; lemoncore then closes the backend's.
$("#chat-stop").addEventListener("click", () => chat.controller?.abort());
$("#chat-clear").addEventListener("click", () => switchTo(newConversation()));
renderList();
