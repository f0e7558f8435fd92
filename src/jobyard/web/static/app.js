// jobyard dashboard: live fragments. No framework, no third-party code.
// An element with data-live="/live/..." listens to that server-sent-event stream and replaces its
// contents with each `fragment` event; when EventSource is missing or keeps failing, it falls
// back to re-fetching data-poll="/partials/..." every 2 s. data-live-state tells which is on.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var MAX_FAILURES = 3;

  function busy(el) {
    // Never replace what the operator is typing into or selecting.
    return el.contains(document.activeElement) && document.activeElement !== document.body;
  }

  function refresh(el) {
    if (document.hidden || busy(el) || el.dataset.busy) return;
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

  function poll(el) {
    if (el.dataset.liveState === "polling" || !el.dataset.poll) return;
    el.dataset.liveState = "polling";
    window.setInterval(function () { refresh(el); }, PERIOD_MS);
  }

  function listen(el) {
    if (!window.EventSource || !el.dataset.live) { poll(el); return; }
    var failures = 0;
    var source = new EventSource(el.dataset.live, { withCredentials: true });
    el.dataset.liveState = "connecting";
    source.addEventListener("open", function () { failures = 0; el.dataset.liveState = "sse"; });
    source.addEventListener("fragment", function (e) {
      if (busy(el)) return;  // the next event brings a fresh copy
      el.innerHTML = e.data;
      el.classList.remove("stale");
      el.dataset.liveAt = String(Date.now());
    });
    source.addEventListener("gone", function () { source.close(); window.location.reload(); });
    source.addEventListener("error", function () {
      failures += 1;
      // CLOSED: the server refused (e.g. 401); otherwise the browser is retrying by itself.
      if (source.readyState === EventSource.CLOSED || failures >= MAX_FAILURES) {
        source.close();
        el.classList.add("stale");
        poll(el);
      }
    });
  }

  function start() {
    document.querySelectorAll("[data-live], [data-poll]").forEach(listen);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
