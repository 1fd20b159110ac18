// skiplock dashboard: live refresh of the element #live and confirmations.
// Every page works without this script; it only saves reloading.
(function () {
  "use strict";

  // Ask before the actions whose form carries data-confirm.
  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute && ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      ev.preventDefault();
    }
  });

  var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  var live = document.getElementById("live");
  if (!seconds || !live) {
    return;
  }
  var toggle = document.getElementById("live-toggle");
  var label = document.getElementById("live-toggle-label");
  var status = document.getElementById("live-status");
  var key = "skiplock-dashboard-live";
  if (toggle && label) {
    label.hidden = false;
    toggle.checked = window.localStorage.getItem(key) !== "off";
    toggle.addEventListener("change", function () {
      window.localStorage.setItem(key, toggle.checked ? "on" : "off");
      if (toggle.checked) {
        refresh();
      }
    });
  }

  var busy = false;
  // A click is a press and a release on the same element: a refresh that replaced
  // the element in between would swallow it (a button pressed just as the region
  // refreshed did nothing). So no refresh applies while a press lasts, nor once a
  // form has been submitted and its page is on its way.
  var pressing = false;
  var leaving = false;
  live.addEventListener("pointerdown", function () {
    pressing = true;
  }, true);
  document.addEventListener("pointerup", function () {
    window.setTimeout(function () {
      pressing = false;
    }, 0);
  }, true);
  document.addEventListener("pointercancel", function () {
    pressing = false;
  }, true);
  document.addEventListener("submit", function (ev) {
    if (!ev.defaultPrevented) {
      leaving = true; // registered after the confirmation above: a refused one leaves nothing
    }
  });
  var failures = 0;
  var tick = 0;

  function editing() {
    var el = document.activeElement;
    return el && live.contains(el) && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName);
  }

  function say(text, stale) {
    if (status) {
      status.textContent = text;
      status.className = stale ? "live-status stale" : "live-status";
    }
  }

  function refresh() {
    if (busy || pressing || leaving || document.hidden || (toggle && !toggle.checked) || editing()) {
      return;
    }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "skiplock-live" } })
      .then(function (res) {
        if (!res.ok) {
          throw new Error("HTTP " + res.status);
        }
        return res.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("live");
        if (fresh && !editing() && !pressing && !leaving) {
          live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
        }
        failures = 0;
        say("updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (err) {
        failures++;
        say("not updated: " + err.message, true);
      })
      .finally(function () {
        busy = false;
      });
  }

  window.setInterval(function () {
    // Back off while the server fails: every 2nd, 4th, ... tick, at most every 8th.
    var every = Math.min(8, Math.pow(2, failures));
    tick = (tick + 1) % every;
    if (tick === 0) {
      refresh();
    }
  }, seconds * 1000);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
})();
