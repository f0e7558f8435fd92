// jobyard dashboard: refresh live fragments every 2 s. No framework, no third-party code.
// An element with data-poll="/partials/..." has its contents replaced by that fragment.
(function () {
  "use strict";
  var PERIOD_MS = 2000;

  function refresh(el) {
    // Skip hidden tabs, and never replace what the operator is typing into or selecting.
    if (document.hidden || el.contains(document.activeElement) || el.dataset.busy) return;
    el.dataset.busy = "1";
    fetch(el.dataset.poll, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        if (!r.ok) { el.classList.add("stale"); return null; }
        return r.text();
      })
      .then(function (html) {
        if (html !== null) { el.innerHTML = html; el.classList.remove("stale"); }
      })
      .catch(function () { el.classList.add("stale"); })
      .finally(function () { delete el.dataset.busy; });
  }

  function start() {
    document.querySelectorAll("[data-poll]").forEach(function (el) {
      window.setInterval(function () { refresh(el); }, PERIOD_MS);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
