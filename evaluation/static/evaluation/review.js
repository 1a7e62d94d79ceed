// The review page's keyboard (evaluation.admin.annotation): 1-9 pick a label
// and save it (then the next item comes), j / ArrowRight the next item,
// k / ArrowLeft the previous one. Keys typed into the note or the corrected
// answer are text, not shortcuts.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    const target = event.target;
    if (target && (target.tagName === "TEXTAREA" || (target.tagName === "INPUT" && target.type === "text"))) {
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    const form = document.getElementById("review-form");
    if (form && /^[1-9]$/.test(event.key)) {
      const radio = form.querySelector('input[name="label"][data-key="' + event.key + '"]');
      if (radio) {
        event.preventDefault();
        radio.checked = true;
        form.submit();
      }
      return;
    }
    const link = (event.key === "j" || event.key === "ArrowRight") ? document.getElementById("review-next")
      : (event.key === "k" || event.key === "ArrowLeft") ? document.getElementById("review-previous") : null;
    if (link) {
      event.preventDefault();
      window.location.href = link.href;
    }
  });
})();
