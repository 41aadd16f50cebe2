// The chat's conversations, kept in this browser's localStorage under STORE: what was
// typed and answered, with the model, system prompt and sampling each was held with.
// Nothing from the key prompt is ever stored (keys live in app.js's memory only).
//
// A conversation: {id, model, system, sampling: {temperature, top_p, max_tokens} (the
// fields' text, "" when unset), messages: [{role, content, reasoning?, stats?}], updated}.

const STORE = "lemoncore.conversations";

/** The stored conversations, most recently updated first; [] when none or unreadable. */
export function loadConversations() {
  try {
    const list = JSON.parse(localStorage.getItem(STORE) || "[]");
    return Array.isArray(list) ? list.sort((a, b) => b.updated - a.updated) : [];
  } catch {
    return [];
  }
}

/** Store the conversations that have a message (an empty one is not worth keeping).
 * Throws when the browser refuses (storage full or disabled). */
export function saveConversations(list) {
  const kept = list.filter((c) => c.messages.length);
  if (kept.length) localStorage.setItem(STORE, JSON.stringify(kept));
  else localStorage.removeItem(STORE);
}

export function newConversation() {
  return {
    id: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`,
    model: "", system: "", sampling: { temperature: "", top_p: "", max_tokens: "" },
    messages: [], updated: Date.now(),
  };
}

/** What the list calls it: its first question, shortened. */
export function titleOf(conversation) {
  const first = conversation.messages.find((m) => m.role === "user")?.content.trim() || "New chat";
  return first.length > 48 ? `${first.slice(0, 47)}…` : first;
}
