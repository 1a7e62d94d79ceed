// The review page's keyboard (evaluation.admin.annotation): 1-9 pick a label
// and save it (the page comes back with the item's automatic score), n the
// next item to label, j / ArrowRight the next item, k / ArrowLeft the
// previous one. "Save" stays disabled until a label is chosen. Keys typed into the note or the corrected
// answer are text, not shortcuts.
(function () {
  "use strict";
  function enableSave() {
    const save = document.getElementById("review-save");
    if (save) {
      save.disabled = false;
      save.removeAttribute("title");
    }
  }
  document.addEventListener("change", function (event) {
    if (event.target && event.target.name === "label") {
      enableSave();
    }
  });
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
    const link = event.key === "n" ? document.getElementById("review-continue")
      : (event.key === "j" || event.key === "ArrowRight") ? document.getElementById("review-next")
      : (event.key === "k" || event.key === "ArrowLeft") ? document.getElementById("review-previous") : null;
    if (link) {
      event.preventDefault();
      window.location.href = link.href;
    }
  });
})();
