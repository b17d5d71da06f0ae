// Reviewer's small script. The pages work without it; it adds:
// 1. live countdowns to expiry, offset by the server's clock (the server decides expiry, not this);
// 2. the live/reconnecting status of the WebSocket (on every (re)connection the server sends the live
//    sections as they are now, so nothing lost while the socket was down stays lost);
// 3. focus and announcements after htmx swaps, for keyboard and screen reader users;
// 4. refusals swapped into the page next to their field, with the socket never clobbering a reply.
(function () {
  "use strict";

  var FOCUS_AFTER_REPLY = "[data-autofocus], [aria-invalid='true']";

  function formatLeft(ms) {
    if (ms <= 0) return "now: expired by the server clock";
    var seconds = Math.floor(ms / 1000);
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var rest = seconds % 60;
    if (days > 0) return "in " + days + " d " + hours + " h";
    if (hours > 0) return "in " + hours + " h " + minutes + " min";
    if (minutes >= 10) return "in " + minutes + " min";
    return "in " + minutes + " min " + rest + " s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (el) {
      if (el.dataset.offset === undefined) {
        // How far the server's clock is ahead of this browser's, measured when the element arrived.
        el.dataset.offset = String(Date.parse(el.dataset.serverNow) - now);
      }
      var left = Date.parse(el.getAttribute("datetime")) - (now + Number(el.dataset.offset));
      var text = formatLeft(left);
      if (el.textContent !== text) el.textContent = text;
      el.classList.toggle("is-urgent", left < 5 * 60 * 1000);
    });
  }

  function showLiveStatus(socketElement, state, text) {
    var status = socketElement.querySelector("[data-live-status]");
    if (!status) return;
    status.hidden = false;
    status.dataset.state = state;
    status.querySelector("[data-live-text]").textContent = text;
  }

  // A person whose access ended keeps no control that would only be refused: the decision panel's
  // forms and the sticky bar's buttons go, and the panel says why.
  function withdrawControls(socketElement) {
    socketElement.querySelectorAll("#decision form, #decision details, .decision-bar__buttons").forEach(function (element) {
      element.remove();
    });
    var panel = socketElement.querySelector("#decision");
    if (panel && !panel.querySelector("[data-access-ended]")) {
      var note = document.createElement("p");
      note.setAttribute("data-access-ended", "");
      note.setAttribute("role", "status");
      note.textContent = "You no longer have access to this request: nothing here can be decided from this page.";
      panel.appendChild(note);
    }
  }

  // approvals/live/consumers.py ACCESS_ENDED: the person lost access (signed out, deprovisioned).
  var ACCESS_ENDED = 4403;

  document.addEventListener("htmx:wsClose", function (event) {
    var closed = event.detail && event.detail.event;
    if (closed && closed.code === ACCESS_ENDED) {
      showLiveStatus(event.target, "ended", "Closed: you no longer have access here. Sign in again to continue.");
      withdrawControls(event.target);
      return;
    }
    showLiveStatus(event.target, "down", "Reconnecting… this page may be out of date");
  });

  document.addEventListener("htmx:wsOpen", function (event) {
    showLiveStatus(event.target, "live", "Live: changes appear as they happen");
  });

  document.addEventListener("htmx:wsAfterMessage", function () {
    var announcer = document.querySelector("[data-announcer]");
    var source = document.querySelector("[data-announce]");
    if (announcer && source) announcer.textContent = "Updated: " + source.textContent.trim();
    tick();
  });

  // With DEBUG on, django-htmx's helper shows any 400/403 response as a full error page. A refusal from a
  // form marked data-swap-errors is the form again with its error next to the field: swap it like any reply.
  window.addEventListener("htmx:beforeOnLoad", function (event) {
    if (event.target.closest && event.target.closest("[data-swap-errors]")) event.stopPropagation();
  }, true);

  // A reviewer's own decision (an htmx request from the panel) and the socket both update the decision panel.
  // The socket must not replace the panel while that request is in flight (its response would land in a
  // detached element and its message be lost), nor when the controls are the same (a half-typed form stays,
  // also when the socket reconnects and sends the panel again).
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var current = event.detail.target;
    var incoming = event.detail.fragment && event.detail.fragment.firstElementChild;
    if (!current || !incoming || current.dataset.mode === undefined) return;
    if (current.querySelector(".htmx-request") || current.dataset.mode === incoming.dataset.mode) {
      event.detail.shouldSwap = false;
    }
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    // After a reply, focus its message, or else the first field with an error, so keyboard and screen
    // reader users land where the reply speaks (the swapped element replaced the old target).
    var target = event.detail.target;
    var swapped = target && target.id ? document.getElementById(target.id) : target;
    var focus = swapped && swapped.querySelector ? swapped.querySelector(FOCUS_AFTER_REPLY) : null;
    if (focus) focus.focus();
    tick();
  });

  // A live part replaced under the keyboard focus gives the focus back to the same control: the element
  // with the same id, the link with the same href, or the button with the same name and value; else the
  // replaced part itself (made focusable for that), never BODY.
  var focusedSelector = null;
  var focusedPart = null;
  function selectorFor(element) {
    if (element.id) return "#" + CSS.escape(element.id);
    if (element.getAttribute("href")) return 'a[href="' + CSS.escape(element.getAttribute("href")) + '"]';
    if (element.name) {
      return element.tagName.toLowerCase() + '[name="' + CSS.escape(element.name) + '"][value="' +
        CSS.escape(element.value || "") + '"]';
    }
    return null;
  }
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var active = document.activeElement;
    if (!event.detail.shouldSwap && event.detail.shouldSwap !== undefined) return;
    if (active && active !== document.body && event.detail.target.contains(active)) {
      focusedSelector = selectorFor(active);
      focusedPart = event.detail.target.id || null;
    }
  });
  document.addEventListener("htmx:oobAfterSwap", function () {
    if (!focusedSelector && !focusedPart) return;
    var part = focusedPart ? document.getElementById(focusedPart) : null;
    var again = focusedSelector ? (part || document).querySelector(focusedSelector) : null;
    if (!again && focusedSelector) again = document.querySelector(focusedSelector);
    if (!again && part) {
      part.setAttribute("tabindex", "-1");
      again = part;
    }
    focusedSelector = null;
    focusedPart = null;
    if (!again) return;
    again.focus({ preventScroll: true });
    // The part itself held the focus (a reply's message, replaced by a later update): its new copy is
    // not focusable until told so, and focus() on it would leave the focus on BODY.
    if (document.activeElement !== again) {
      again.setAttribute("tabindex", "-1");
      again.focus({ preventScroll: true });
    }
  });

  // "Copy the codes": the text of the element the button names, one code a line.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) return;
    var source = document.querySelector(button.dataset.copy);
    var status = button.parentElement.querySelector("[data-copy-status]");
    var text = Array.prototype.map.call(source.querySelectorAll("li"), function (li) {
      return li.textContent.trim();
    }).join("\n");
    navigator.clipboard.writeText(text).then(function () {
      if (status) status.textContent = "Copied.";
    }, function () {
      if (status) status.textContent = "Copying is not allowed here: select the codes and copy them.";
    });
  });

  // On a phone the list's filters start folded unless some are in use: the first screen shows proposals.
  function foldFiltersOnAPhone() {
    if (!window.matchMedia("(max-width: 44rem)").matches) return;
    document.querySelectorAll("details[data-fold-on-phone]:not([data-filters-on])").forEach(function (el) {
      el.open = false;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    foldFiltersOnAPhone();
    var focus = document.querySelector(FOCUS_AFTER_REPLY);
    if (focus) focus.focus();
    tick();
    window.setInterval(tick, 1000);
  });
})();
