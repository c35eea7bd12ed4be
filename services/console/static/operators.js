/* The operators page: zoom the operator graph (it starts at its natural size, 100%). */
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var tools = document.querySelector(".graph-tools");
  var svg = document.querySelector("svg.operator-graph");
  if (!tools || !svg) { return; }
  var width = Number(svg.getAttribute("width"));
  var height = Number(svg.getAttribute("height"));
  var scale = 1;
  var level = tools.querySelector(".zoom-level");
  function apply() {
    svg.setAttribute("width", String(Math.round(width * scale)));
    svg.setAttribute("height", String(Math.round(height * scale)));
    level.textContent = Math.round(scale * 100) + "%";
  }
  tools.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-zoom]");
    if (!button) { return; }
    var how = button.getAttribute("data-zoom");
    if (how === "in") { scale = Math.min(2, scale * 1.25); }
    else if (how === "out") { scale = Math.max(0.25, scale / 1.25); }
    else { scale = 1; }
    apply();
  });
  tools.hidden = false;
});
