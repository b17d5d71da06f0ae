// Passkeys (WebAuthn) in the browser: the server makes every challenge (accounts/passkeys.py) and checks
// every answer; this file only passes options to navigator.credentials and puts the answer, as JSON, in
// the form's hidden "passkey" field.
// 1. Your devices: "Add a passkey" (form[data-passkey-register]) creates one; "Confirm with a passkey"
//    (button[data-passkey-confirm-button]) answers the confirm challenge a change to your factors needs.
// 2. Sign-in: "Use a passkey instead of a code" (button[data-passkey-sign-in]) answers instead of a code.
// 3. A vote or an edit (form[data-passkey-challenge]): on Approve, Reject, Ask or Create, a challenge
//    bound to this proposal and the digest on the page is answered, when the policy needs a passkey or
//    the code field is left empty.
(function () {
  "use strict";

  function toBytes(text) {
    var base64 = text.replace(/-/g, "+").replace(/_/g, "/");
    while (base64.length % 4) base64 += "=";
    var raw = atob(base64);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes.buffer;
  }

  function toText(buffer) {
    var bytes = new Uint8Array(buffer);
    var raw = "";
    for (var i = 0; i < bytes.length; i++) raw += String.fromCharCode(bytes[i]);
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function descriptors(list) {
    return (list || []).map(function (item) {
      return Object.assign({}, item, { id: toBytes(item.id) });
    });
  }

  // The answer as JSON (what PublicKeyCredential.toJSON() gives where the browser has it).
  function answerJSON(credential) {
    if (typeof credential.toJSON === "function") return JSON.stringify(credential.toJSON());
    var response = credential.response;
    var out = {
      id: credential.id,
      rawId: toText(credential.rawId),
      type: credential.type,
      authenticatorAttachment: credential.authenticatorAttachment || undefined,
      clientExtensionResults: credential.getClientExtensionResults(),
      response: { clientDataJSON: toText(response.clientDataJSON) },
    };
    if (response.attestationObject) {
      out.response.attestationObject = toText(response.attestationObject);
      out.response.transports = response.getTransports ? response.getTransports() : [];
    } else {
      out.response.authenticatorData = toText(response.authenticatorData);
      out.response.signature = toText(response.signature);
      if (response.userHandle) out.response.userHandle = toText(response.userHandle);
    }
    return JSON.stringify(out);
  }

  function fetchOptions(url, form, extra) {
    var body = new URLSearchParams(extra || {});
    var token = form.querySelector("input[name=csrfmiddlewaretoken]");
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-CSRFToken": token ? token.value : "" },
      body: body,
    }).then(function (response) {
      if (response.ok) return response.json();
      // A refusal names what is needed (e.g. confirm with a passkey first): say it as the server does.
      return response.json().catch(function () { return {}; }).then(function (body) {
        var message = body && body.error && body.error.message;
        throw new Error(message || "the server gave no passkey challenge (" + response.status + ")");
      });
    });
  }

  function getAssertion(options) {
    options.challenge = toBytes(options.challenge);
    options.allowCredentials = descriptors(options.allowCredentials);
    return navigator.credentials.get({ publicKey: options }).then(answerJSON);
  }

  function say(form, text) {
    var status = form.querySelector("[data-passkey-status]");
    if (status) status.textContent = text;
  }

  function failed(form, error) {
    say(form, "The passkey was not used (" + (error && error.message ? error.message : error) +
      "). Try again" + (form.querySelector("[name=otp_code]") ? ", or type a one-time code if this policy accepts one." : "."));
  }

  var supported = !!(window.PublicKeyCredential && navigator.credentials);

  // 1. Your devices: add a passkey.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches("form[data-passkey-register]")) return;
    event.preventDefault();
    if (!supported) return say(form, "This browser cannot create passkeys.");
    say(form, "Follow your browser's prompt to create the passkey…");
    fetchOptions(form.dataset.passkeyRegister, form).then(function (options) {
      options.challenge = toBytes(options.challenge);
      options.user.id = toBytes(options.user.id);
      options.excludeCredentials = descriptors(options.excludeCredentials);
      return navigator.credentials.create({ publicKey: options });
    }).then(function (credential) {
      form.querySelector("input[name=passkey]").value = answerJSON(credential);
      form.submit();
    }).catch(function (error) { failed(form, error); });
  });

  // 1b. Your devices: confirm it is you with a passkey before changing your factors.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-passkey-confirm-button]");
    if (!button) return;
    var form = button.form;
    event.preventDefault();
    if (!supported) return say(form, "This browser cannot use passkeys.");
    say(form, "Follow your browser's prompt to use your passkey…");
    fetchOptions(form.dataset.passkeyConfirm, form).then(getAssertion).then(function (answer) {
      form.querySelector("input[name=passkey]").value = answer;
      var code = form.querySelector("input[name=otp_token]");
      if (code) code.value = "";
      form.submit();
    }).catch(function (error) { failed(form, error); });
  });

  // 2. Sign-in with a passkey instead of a code.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-passkey-sign-in]");
    if (!button) return;
    var form = button.form;
    say(form, "Follow your browser's prompt to use your passkey…");
    fetchOptions(button.dataset.passkeySignIn, form).then(getAssertion).then(function (answer) {
      form.querySelector("input[name=passkey]").value = answer;
      form.querySelector("input[name=otp_token]").value = "";
      form.submit();
    }).catch(function (error) { failed(form, error); });
  });

  // 3. A vote or an edit: answer this proposal's challenge, then send the form.
  function wantsPasskey(form) {
    if (!form.matches("form[data-passkey-challenge]")) return false;
    if (form.hasAttribute("data-passkey-required")) return true;
    var code = form.querySelector("[name=otp_code]");
    return !!code && !code.value.trim();
  }

  function confirmThen(form, send) {
    if (!supported) return say(form, "This browser cannot use passkeys.");
    say(form, "Confirm with your passkey: follow your browser's prompt…");
    var digest = form.querySelector("[name=digest]");
    fetchOptions(form.dataset.passkeyChallenge, form, { digest: digest ? digest.value : "" })
      .then(getAssertion)
      .then(function (answer) {
        form.querySelector("input[name=passkey]").value = answer;
        say(form, "");
        send();
      })
      .catch(function (error) { failed(form, error); });
  }

  // The decision form is sent by htmx: htmx:confirm lets the request wait for the passkey.
  document.addEventListener("htmx:confirm", function (event) {
    var form = event.detail.elt.closest && event.detail.elt.closest("form");
    if (!form || !wantsPasskey(form)) return;
    event.preventDefault();
    // htmx sends the button last focused (Approve, Reject or Ask): the browser's passkey prompt may take
    // the focus, so give it back before sending.
    var trigger = event.detail.triggeringEvent;
    var submitter = trigger && trigger.submitter;
    confirmThen(form, function () {
      if (submitter && document.contains(submitter)) submitter.focus();
      event.detail.issueRequest(true);
    });
  });

  // A plain form (the edit page).
  var confirmed = null;
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.hasAttribute("hx-post") || !wantsPasskey(form)) return;
    if (confirmed === form) { confirmed = null; return; }
    event.preventDefault();
    var submitter = event.submitter;
    confirmThen(form, function () { confirmed = form; form.requestSubmit(submitter); });
  });

  document.addEventListener("DOMContentLoaded", function () {
    if (!supported) return;
    document.querySelectorAll("[data-passkey-only-if-supported]").forEach(function (el) { el.hidden = false; });
  });
})();
