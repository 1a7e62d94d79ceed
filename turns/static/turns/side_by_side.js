/* The side-by-side page (templates/chat/side_by_side.html), beside chat.js,
 * which draws and streams each column's turn: a column's "Keep as example…"
 * shows once its turn has an answer (chat.js's `.answer`), since an example
 * needs a gold answer; and Ctrl+Enter in either box asks. */
(function () {
  "use strict";
  var form = document.getElementById("side-by-side-form");
  if (form) {
    form.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        if (typeof form.requestSubmit === "function") { form.requestSubmit(); } else { form.submit(); }
      }
    });
  }
  var columns = document.getElementById("turns");
  if (!columns) { return; }
  function showKeep() {
    Array.prototype.forEach.call(columns.querySelectorAll(".column"), function (column) {
      var keep = column.querySelector("form.keep");
      if (keep) { keep.hidden = !column.querySelector("article.turn .answer"); }
    });
  }
  new MutationObserver(showKeep).observe(columns, { childList: true, subtree: true });
  showKeep();
})();
