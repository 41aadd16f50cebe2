// What several tabs show: system-info (recipes, their backends and options), the model
// list and the loaded servers. A refresh tells every tab that listens (onModels).

import { $, el, getJSON } from "./app.js";

export const state = { info: null, models: [], loaded: new Map(), heldOff: new Map() };
const listeners = [];

/** Call `render` after every model refresh. */
export function onModels(render) { listeners.push(render); }

export async function refreshInfo() {
  state.info = await getJSON("/api/v1/system-info");
  $("#version").textContent = `v${state.info.version} · ${state.info.os}`;
  const recipes = Object.keys(state.info.recipes);
  const select = $("#add-recipe");
  const chosen = select.value || "llamacpp";
  select.replaceChildren(...recipes.map((r) => el("option", { value: r, selected: r === chosen }, r)));
}

export async function refreshModels() {
  const [list, health] = await Promise.all([
    getJSON("/v1/models?show_all=true"), getJSON("/api/v1/health")]);
  state.models = list.data;
  state.loaded = new Map(health.all_models_loaded.map((m) => [m.model_name, m]));
  state.heldOff = new Map((health.held_off ?? []).map((h) => [h.model, h]));
  for (const render of listeners) render();
}

/** The names of a recipe's backends that can run here (system-info's state is not
 * `unsupported`); null until system-info is known. */
export function usableBackends(recipe) {
  const backends = state.info?.recipes[recipe]?.backends;
  if (!backends) return null;
  return new Set(Object.entries(backends).filter(([, b]) => b.state !== "unsupported").map(([n]) => n));
}
