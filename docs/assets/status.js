// The status banner: the alerts firing now, read from the published site's status.json (nginx passes it to the
// monitoring node's alert receiver, clusterbook/node/alert_journal.py). Every text is set as text, never as HTML.
(function () {
  "use strict";
  var script = document.currentScript;
  if (!script || !window.fetch) return;
  var root = new URL("..", script.src);  // this file is assets/status.js under the site's root
  var ENTRY = /^[a-z0-9][a-z0-9-]*$/;

  function element(tag, text, cls) {
    var e = document.createElement(tag);
    if (text) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function banner(kind, parts) {
    var box = element("div", "", "clusterbook-status clusterbook-status--" + kind);
    box.setAttribute("role", kind === "firing" ? "alert" : "status");
    parts.forEach(function (p) { box.appendChild(p); });
    var main = document.querySelector(".md-content__inner") || document.querySelector("main") || document.body;
    main.insertBefore(box, main.firstChild);
  }

  function entries(text) {
    var span = element("span", "");
    String(text || "").split(/[,\s]+/).filter(function (id) { return ENTRY.test(id); }).forEach(function (id, i) {
      if (i) span.appendChild(document.createTextNode(", "));
      var a = element("a", id);
      a.href = new URL("troubleshooting/#" + id, root).href;
      span.appendChild(a);
    });
    return span;
  }

  function show(status) {
    var firing = Array.isArray(status.firing) ? status.firing : [];
    var asOf = status.as_of ? " (as of " + status.as_of + ")" : "";
    if (!status.as_of) {
      banner("quiet", [element("span", "Alerts: the monitoring node's receiver has heard nothing since it " +
                                "started; `invoke status` asks Prometheus.")]);
    } else if (!firing.length) {
      banner("clear", [element("span", "No alert firing" + asOf + ".")]);
    } else {
      var list = element("ul", "");
      firing.forEach(function (a) {
        var item = element("li", "");
        item.appendChild(element("strong", String(a.alert)));
        item.appendChild(document.createTextNode(" · " + [a.tier, a.node, a.severity].filter(Boolean).join(" · ") +
                                                  (a.summary ? ": " + a.summary : "") + " "));
        if (a.troubleshooting) {
          item.appendChild(document.createTextNode("→ "));
          item.appendChild(entries(a.troubleshooting));
        }
        list.appendChild(item);
      });
      banner("firing", [element("strong", firing.length + (firing.length === 1 ? " alert" : " alerts") +
                                " firing" + asOf), list]);
    }
  }

  function silent(why) {  // the published site, its alert receiver not answering: that is news, not a copy
    banner("firing", [element("span", "Alerts: the monitoring node's alert receiver does not answer" +
                              (typeof why === "number" ? " (HTTP " + why + ")" : "") + ", so this banner cannot " +
                              "say what fires; `invoke status` asks Prometheus itself.")]);
  }

  function copy() {
    banner("quiet", [element("span", "No live alert status in this copy of the site (the published one shows " +
                              "it); `invoke status` lists the alerts firing now.")]);
  }

  // a copy opened from disk fetches nothing (the browser would log a refused request on every page); a served copy
  // finds the build's own status.json, which says it is a copy (where the site is published, nginx answers
  // status.json from the alert receiver instead)
  if (window.location.protocol === "file:") return copy();
  fetch(new URL("status.json", root).href, {cache: "no-store"})
    .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
    .then(function (status) { return status && status.copy ? copy() : show(status); }, silent);
})();
