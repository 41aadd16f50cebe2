// The Models tab: the catalogue and registered models with their size, usable backends
// and state; pull, load (with the options form), unload, pin, delete; and the Add form.
// An action's error is shown where the action was: in its row, or in the Add form.

import { $, bytes, el, getJSON, notice, streamed } from "./app.js";
import { onModels, refreshModels, state, usableBackends } from "./state.js";

const openOptions = new Set(); // models whose options form is open
const pulled = new Map(); // model -> the last progress label of a pull this page made
// The last failed action's error per model, shown in its row until its next action:
// the table re-renders after every action, so an error kept only in the DOM would vanish.
const actionErrors = new Map();

export function renderModels() {
  const words = $("#model-filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const onlyDownloaded = $("#model-downloaded").checked;
  const rows = state.models.filter((m) => {
    const text = [m.id, m.recipe, m.checkpoint, ...m.labels, ...m.aliases].join(" ").toLowerCase();
    return words.every((w) => text.includes(w)) && (!onlyDownloaded || m.downloaded);
  });
  $("#model-rows").replaceChildren(...rows.flatMap(modelRows));
}
onModels(renderModels);

/** The backends a model's recipe can run here, as "name (tier)" for non-core tiers. */
function backendNames(model) {
  const usable = usableBackends(model.recipe);
  return model.backends.filter((b) => !usable || usable.has(b.name))
    .map((b) => `${b.name}${b.tier === "core" ? "" : ` (${b.tier})`}`).join(", ");
}

function modelRows(model) {
  const loaded = state.loaded.get(model.id);
  const held = state.heldOff.get(model.id); // its starts failed: why is in the tooltip
  const status = el("td", { "data-label": "State" },
    loaded ? el("span", { class: `badge ${loaded.status}` }, `loaded · ${loaded.status}`) : null,
    held ? el("span", { class: "badge error held-off", title: held.reason }, "held off") : null,
    loaded?.pinned ? el("span", { class: "badge pinned" }, "pinned") : null,
    model.downloaded ? el("span", { class: "badge downloaded" }, "downloaded")
      : el("span", { class: "badge" }, "not downloaded"));
  const progress = el("div", { class: "row-progress" });
  if (actionErrors.has(model.id)) progress.append(el("div", { class: "error" }, actionErrors.get(model.id)));
  const act = (label, fn, cls) =>
    el("button", { class: cls, onclick: () => run(fn, progress, model.id) }, label);
  const actions = el("td", { class: "actions", "data-model": model.id, "data-label": "Actions" });
  if (pulled.has(model.id)) { // the finished pull's bar stays until the page reloads
    progress.append(el("div", { class: "progress" }, el("progress", { max: 100, value: 100 }),
      el("span", { class: "progress-label" }, pulled.get(model.id))));
  }
  if (!model.downloaded) {
    actions.append(act("Pull", async () => {
      await streamed("/api/v1/pull", { model_name: model.id }, progress);
      pulled.set(model.id, progress.querySelector(".progress-label").textContent);
    }, "primary pull"));
  } else if (loaded) {
    actions.append(act("Unload", () => getJSON("/api/v1/unload", { model_name: model.id })),
      act(loaded.pinned ? "Unpin" : "Pin",
        () => getJSON("/api/v1/load", { model_name: model.id, pinned: !loaded.pinned })));
  } else {
    actions.append(act("Load", () => getJSON("/api/v1/load", { model_name: model.id }), "primary load"),
      act("Load pinned", () => getJSON("/api/v1/load", { model_name: model.id, pinned: true })));
  }
  if (model.downloaded) {
    actions.append(el("button", { class: "options-toggle", onclick: () => {
      openOptions.has(model.id) ? openOptions.delete(model.id) : openOptions.add(model.id);
      renderModels();
    } }, "Options…"));
  }
  if (model.deletable) { // a file: or pkg: catalogue model is not lemoncore's to delete
    const question = model.downloaded ? `Delete ${model.id}'s downloaded files?`
      : `Remove ${model.id} from the list? Nothing of it is downloaded.`;
    actions.append(act("Delete", async () => {
      if (confirm(question)) await getJSON("/api/v1/delete", { model_name: model.id });
    }));
  }
  actions.append(progress);
  const row = el("tr", { "data-model": model.id },
    el("td", { class: "model", "data-label": "Model" }, el("strong", {}, model.id),
      el("div", { class: "muted" }, model.checkpoint),
      model.labels.length ? el("div", { class: "muted" }, model.labels.join(", ")) : null),
    el("td", { "data-label": "Recipe" }, model.recipe,
      el("div", { class: "muted backends" }, backendNames(model))),
    el("td", { class: "size", "data-label": "Size" }, bytes(model.size_bytes) || "—"), status, actions);
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
  const usable = usableBackends(model.recipe);
  const backend = el("select", { name: "backend" }, el("option", { value: "" }, "(automatic)"),
    ...[...usable].map((name) => el("option", { value: name }, `${name} (${recipe.backends[name].state})`)));
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
    run(() => getJSON("/api/v1/load", body), progress, model.id);
  });
  return form;
}

/** A row's action: "working…" (or its own progress) in `box`, its error kept for the
 * row (actionErrors), then the lists refreshed. */
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

// Add: its progress and its error stay in the form (the bar's label ends in the error);
// the list is refreshed either way, so what the server kept (or removed) shows.
$("#add-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = new FormData(e.target);
  const labels = String(form.get("labels") || "").split(",").map((s) => s.trim()).filter(Boolean);
  try {
    await streamed("/api/v1/pull", { model_name: form.get("model_name"),
      checkpoint: form.get("checkpoint"), recipe: form.get("recipe"),
      ...(labels.length ? { labels } : {}) }, $("#add-progress"));
  } catch {
    // shown by the bar's label
  } finally {
    refreshModels().catch((err) => notice(err.message));
  }
});
$("#model-filter").addEventListener("input", renderModels);
$("#model-downloaded").addEventListener("change", renderModels);
