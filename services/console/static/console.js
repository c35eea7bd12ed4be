// Loupe console: a light client. Pages work without it; with it, live panels update.
"use strict";

// Open the server-sent events of every element with data-events="URL"; each event's
// JSON goes to the handler registered under its name (Loupe.on(name, handler)).
const Loupe = {
  handlers: {},
  on(name, handler) { (this.handlers[name] = this.handlers[name] || []).push(handler); },
  connect(element) {
    const source = new EventSource(element.dataset.events);
    element.dataset.live = "connecting";
    source.onopen = () => { element.dataset.live = "open"; };
    source.onerror = () => { element.dataset.live = "retrying"; };
    const names = (element.dataset.eventNames || "").split(/\s+/).filter(Boolean);
    for (const name of names.concat(["sql-error"])) {
      source.addEventListener(name, (event) => {
        const data = JSON.parse(event.data);
        for (const handler of Loupe.handlers[name] || []) handler(data, element);
      });
    }
    return source;
  },
};
Loupe.on("sql-error", (data, element) => {
  element.dataset.live = "failed";
  const note = document.createElement("p");
  note.className = "error";
  note.setAttribute("role", "alert");
  note.textContent = `Live updates stopped (${data.sqlstate}): ${data.message}`;
  element.prepend(note);
});
window.Loupe = Loupe;
document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll("[data-events]")) Loupe.connect(element);
});
