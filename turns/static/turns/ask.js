// The conversation list's "Ask something new" (templates/chat/conversation_list.html):
// Enter sends the first question as it does a follow-up on the conversation
// page (chat.js); Shift+Enter starts a new line, and IME composition is left alone.
(function () {
  "use strict";
  var question = document.querySelector("form.ask textarea[name=question]");
  if (!question) { return; }
  question.addEventListener("keydown", function (ev) {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      if (!question.value.trim()) { return; }
      var form = question.form;
      if (typeof form.requestSubmit === "function") { form.requestSubmit(); } else { form.submit(); }
    }
  });
})();
