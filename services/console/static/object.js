// The Object page: live hydration of the plan tree's nodes (server-sent events from
// /objects/<id>/events). Each update changes a node's colour AND its words: state label,
// progress bar, percent, records and ETA, so the page reads the same without colour.
"use strict";

(function () {
  const STATES = ["hydrated", "hydrating", "not-started", "unknown"];

  function setText(root, field, text) {
    const element = root.querySelector(`[data-field="${field}"]`);
    if (element && element.textContent !== text) element.textContent = text;
  }

  function updateCell(cell, update) {
    for (const name of STATES) cell.classList.remove(`cell-${name}`);
    cell.classList.add(`cell-${update.state}`);
    cell.dataset.state = update.state;
    const label = cell.querySelector('[data-field="label"]');
    if (label) {
      for (const name of STATES) label.classList.remove(`state-${name}`);
      label.classList.add(`state-${update.state}`);
    }
    setText(cell, "label", update.label);
    setText(cell, "percent", update.percent);
    setText(cell, "records", update.records);
    setText(cell, "eta", update.eta_text);
    const bar = cell.querySelector("progress");
    if (bar) {
      if (update.fraction === null || update.fraction === undefined) bar.removeAttribute("value");
      else bar.value = update.fraction;
      bar.textContent = update.percent;
    }
  }

  // A replica seen offline on this page: when it comes back, its row still says when.
  const lastOffline = {};

  function markReplica(replicaId, status) {
    const online = status.status === "online";
    if (!online && status.at) lastOffline[replicaId] = status.at;
    // The status history keeps a crash that came and went between two of our updates.
    if (status.offline_at) lastOffline[replicaId] = status.offline_at;
    const text = online
      ? `● online${lastOffline[replicaId] ? " (last offline at " + lastOffline[replicaId] + ")" : ""}`
      : `✕ ${status.status || "unknown"}${status.at ? " since " + status.at : ""}`;
    // The replica's lines in the tree carry an "offline" badge while it is.
    for (const name of document.querySelectorAll(`li.cell[data-replica="${CSS.escape(replicaId)}"] .rname`)) {
      let badge = name.querySelector('[data-field="mark"]');
      if (online) {
        if (badge) badge.remove();
        continue;
      }
      if (!badge) {
        badge = document.createElement("span");
        badge.dataset.field = "mark";
        badge.className = "mark mark-offline";
        name.append(" ", badge);
      }
      badge.textContent = status.status || "unknown";
    }
    for (const row of document.querySelectorAll(`tr[data-replica="${CSS.escape(replicaId)}"]`)) {
      const mark = row.querySelector('[data-field="replica-mark"]');
      if (!mark) continue;
      mark.textContent = text;
      mark.classList.toggle("status-online", online);
      mark.classList.toggle("status-offline", !online);
      const summary = status.summary;
      if (!summary) continue;
      const label = row.querySelector('[data-field="summary-label"]');
      if (label) {
        for (const name of STATES) label.classList.remove(`state-${name}`);
        label.classList.add(`state-${summary.state}`);
      }
      setText(row, "summary-label", summary.label);
      setText(row, "summary-records", summary.records);
      if (status.incarnation !== null && status.incarnation !== undefined) setText(row, "incarnation", String(status.incarnation));
      setText(row, "summary-eta", summary.eta_text);
    }
  }

  Loupe.on("nodes", (data, element) => {
    for (const update of data.nodes) {
      const selector = `li.cell[data-node="${CSS.escape(String(update.node))}"][data-replica="${CSS.escape(update.replica)}"]`;
      for (const cell of element.querySelectorAll(selector)) updateCell(cell, update);
    }
    for (const [replicaId, status] of Object.entries(data.replicas || {})) markReplica(replicaId, status);
    element.dataset.updates = String(Number(element.dataset.updates || 0) + 1);
    const note = document.querySelector("[data-live-status]");
    if (note) note.textContent = `Live updates: on (last ${new Date().toLocaleTimeString()})`;
  });

  Loupe.on("keepalive", () => {
    const note = document.querySelector("[data-live-status]");
    if (note && note.textContent.includes("connecting")) note.textContent = "Live updates: on";
  });
})();
