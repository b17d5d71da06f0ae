// "Your devices" → notifications: register the service worker and subscribe this browser to Web Push,
// then hand the subscription to Reviewer. No inline script (the CSP allows none).
(function () {
  function keyBytes(base64url) {
    const padded = (base64url + "===".slice((base64url.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
  }
  function csrf() {
    const match = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }
  async function subscribe(button) {
    const status = document.querySelector("[data-push-status]");
    const say = (text) => { if (status) { status.textContent = text; } };
    if (!("serviceWorker" in navigator) || !("PushManager" in window)) {
      say("This browser cannot receive push notifications (on an iPhone, add Reviewer to the home screen first).");
      return;
    }
    try {
      if ((await Notification.requestPermission()) !== "granted") { say("Notifications are blocked for this site."); return; }
      const registration = await navigator.serviceWorker.register("/sw.js", {scope: "/"});
      await navigator.serviceWorker.ready;
      const subscription = await registration.pushManager.subscribe({
        userVisibleOnly: true, applicationServerKey: keyBytes(button.dataset.pushKey),
      });
      const body = Object.assign(subscription.toJSON(), {name: navigator.platform || "This device"});
      const response = await fetch(button.dataset.pushSubscribe, {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrf()}, body: JSON.stringify(body),
      });
      if (response.ok) { window.location.reload(); return; }
      const answer = await response.json().catch(() => ({}));
      say((answer.error && answer.error.message) || "Reviewer refused this device.");
    } catch (error) {
      say("Could not subscribe this device: " + error.message);
    }
  }
  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-push-subscribe]");
    if (button) { subscribe(button); }
  });
})();
