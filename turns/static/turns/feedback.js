/* Thumbs up / down and a comment under each answered turn of the chat page
   (docs/chat-and-api.md#feedback). Additive to chat.js: it watches #turns for
   an answer (`.answer`) and adds a bar once per answer; ratings are sent with
   POST /api/turns/{id}/feedback; the page's data holds the user's current ones. */
(function () {
  "use strict";
  var turnsEl = document.getElementById("turns");
  var dataEl = document.getElementById("page-data");
  if (!turnsEl || !dataEl) { return; }
  var current = JSON.parse(dataEl.textContent).feedback || {};

  function cookie(name) {
    var m = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return m ? decodeURIComponent(m[1]) : "";
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function send(turnId, rating, comment) {
    return fetch("/api/turns/" + turnId + "/feedback", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Accept": "application/json", "Content-Type": "application/json", "X-CSRFToken": cookie("csrftoken") },
      body: JSON.stringify({ rating: rating, comment: comment })
    }).then(function (res) {
      return res.json().catch(function () { return null; }).then(function (data) { return { ok: res.ok, status: res.status, data: data }; });
    });
  }

  function bar(turnId) {
    var box = el("div", "feedback");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Rate this answer");
    var mine = current[turnId] || { rating: "", comment: "" };
    var up = el("button", "small", "Good");
    var down = el("button", "small", "Bad");
    up.type = down.type = "button";
    up.setAttribute("aria-label", "Good answer");
    down.setAttribute("aria-label", "Bad answer");
    var comment = el("textarea");
    comment.placeholder = "What was good or wrong? (optional)";
    comment.setAttribute("aria-label", "Comment on this answer");
    comment.maxLength = 4000;
    comment.value = mine.comment || "";
    comment.hidden = !mine.rating;
    var save = el("button", "small", "Send comment");
    save.type = "button";
    save.hidden = !mine.rating;
    var status = el("span", "status");
    status.setAttribute("role", "status");

    function show(rating) {
      up.setAttribute("aria-pressed", String(rating === "up"));
      down.setAttribute("aria-pressed", String(rating === "down"));
    }
    function rate(rating) {
      up.disabled = down.disabled = save.disabled = true;
      status.className = "status";
      status.textContent = "Sending…";
      send(turnId, rating, comment.value).then(function (res) {
        up.disabled = down.disabled = save.disabled = false;
        if (!res.ok) {
          status.className = "status error";
          status.textContent = res.data && res.data.error ? res.data.error.message : "Could not send (HTTP " + res.status + ").";
          return;
        }
        current[turnId] = { rating: rating, comment: res.data.comment };
        show(rating);
        comment.hidden = save.hidden = false;
        status.textContent = "Thanks: rated " + (rating === "up" ? "good" : "bad") + (res.data.comment ? ", with your comment." : ".");
      });
    }
    up.addEventListener("click", function () { rate("up"); });
    down.addEventListener("click", function () { rate("down"); });
    save.addEventListener("click", function () { rate(current[turnId].rating); });
    show(mine.rating);
    box.appendChild(el("span", "label", "Was this answer good?"));
    box.appendChild(up);
    box.appendChild(down);
    box.appendChild(status);
    box.appendChild(comment);
    box.appendChild(save);
    return box;
  }

  function decorate() {
    Array.prototype.forEach.call(turnsEl.querySelectorAll("article.turn"), function (article) {
      var answer = article.querySelector(".answer");
      if (answer && !answer.querySelector(".feedback")) {
        answer.appendChild(bar(article.getAttribute("data-turn-id")));
      }
    });
  }

  new MutationObserver(decorate).observe(turnsEl, { childList: true, subtree: true });
  decorate();
})();
