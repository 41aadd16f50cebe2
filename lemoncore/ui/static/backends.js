// The Backends tab: every recipe's backends with their state, tier and the fix for one
// that needs an action; install (asking consent for an experimental one), update and
// uninstall.

import { $, el, getJSON, notice, streamed } from "./app.js";
import { refreshInfo, state } from "./state.js";

export function renderBackends() {
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

