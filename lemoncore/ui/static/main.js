// The page's start: tabs, the first refresh, and window.lemonUI for tests and the console.

import { $, notice } from "./app.js";
import { renderBackends } from "./backends.js";
import { renderMarkdown } from "./markdown.js";
import { showLogs, stopLogs } from "./logs.js";
import { refreshStatus } from "./status.js";
import { refreshInfo, refreshModels } from "./state.js";
import "./chat.js";
import "./models.js";

let statusTimer = null;

function show(tab) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll("section.tab")) s.hidden = s.id !== tab;
  clearInterval(statusTimer);
  if (tab !== "logs") stopLogs();
  const fail = (err) => notice(err.message);
  if (tab === "models") refreshModels().catch(fail);
  if (tab === "backends") refreshInfo().then(renderBackends).catch(fail);
  if (tab === "chat") { refreshModels().catch(fail); $("#chat-input").focus(); }
  if (tab === "logs") showLogs();
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
$("#models-refresh").addEventListener("click", refreshAll);
$("#status-refresh").addEventListener("click", () => refreshStatus().catch((err) => notice(err.message)));
window.lemonUI = { renderMarkdown, show };
refreshAll().then(() => show(location.hash.slice(1) || "models"));
