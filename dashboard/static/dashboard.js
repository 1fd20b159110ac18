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
    // A checkbox keeps the focus after a click; selecting() covers it instead.
    return el && live.contains(el) && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName) && el.type !== "checkbox";
  }

  function say(text, stale) {
    if (status) {
      status.textContent = text;
      status.className = stale ? "live-status stale" : "live-status";
    }
  }

  // patch makes the node cur read like next, changing only what differs: an element
  // that stays keeps its identity, so a link under the pointer, the keyboard focus and
  // a text selection outlive a refresh that did not change them (replacing the whole
  // region every second lost all three, and a click pressed as it landed).
  function patch(cur, next) {
    if (cur.nodeType !== next.nodeType || cur.nodeName !== next.nodeName) {
      cur.parentNode.replaceChild(document.importNode(next, true), cur);
      return;
    }
    if (cur.nodeType !== Node.ELEMENT_NODE) {
      if (cur.nodeValue !== next.nodeValue) {
        cur.nodeValue = next.nodeValue;
      }
      return;
    }
    var i;
    for (i = cur.attributes.length - 1; i >= 0; i--) {
      if (!next.hasAttribute(cur.attributes[i].name)) {
        cur.removeAttribute(cur.attributes[i].name);
      }
    }
    for (i = 0; i < next.attributes.length; i++) {
      var a = next.attributes[i];
      if (cur.getAttribute(a.name) !== a.value) {
        cur.setAttribute(a.name, a.value);
      }
    }
    patchChildren(cur, next);
  }

  function patchChildren(cur, next) {
    var have = cur.childNodes;
    var want = next.childNodes;
    var i;
    for (i = 0; i < want.length && i < have.length; i++) {
      patch(have[i], want[i]);
    }
    for (; i < want.length; i++) {
      cur.appendChild(document.importNode(want[i], true));
    }
    while (have.length > want.length) {
      cur.removeChild(cur.lastChild);
    }
  }

  // selecting reports whether jobs are selected for a bulk action. A refresh patches
  // rows by position, so on a newest-first list a new job would slide a ticked box
  // onto another job: refreshes wait until the selection is cleared or submitted.
  function selecting() {
    return live.querySelector('input[type="checkbox"][name="id"]:checked') !== null;
  }

  function refresh() {
    if (selecting()) {
      say("paused while jobs are selected", false);
      return;
    }
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
        if (fresh && !editing() && !selecting() && !pressing && !leaving) {
          patchChildren(live, fresh);
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
