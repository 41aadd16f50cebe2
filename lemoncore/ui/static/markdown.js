/** Markdown, safely: the text is HTML-escaped first, then a few constructs get tags of
 * ours (fenced and inline code, headings, lists, bold, italics, http(s) links). */
export function renderMarkdown(text) {
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
