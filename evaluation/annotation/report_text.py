"""The judge report as text (``manage.py judge_report``)."""

from __future__ import annotations

from typing import Any

__all__ = ["corrected_text", "format_judge_report"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _matrix(confusion: dict[str, Any]) -> list[str]:
    classes = confusion["classes"]
    width = max([len(c) for c in classes] + [10])
    lines = ["  " + "judge \\ human".ljust(width + 4) + "".join(c.rjust(width + 2) for c in classes)]
    for name, row in zip(classes, confusion["table"], strict=True):
        lines.append("  " + name.ljust(width + 4) + "".join(str(v).rjust(width + 2) for v in row))
    return lines


def _alignment_lines(block: dict[str, Any]) -> list[str]:
    ci = block["agreement_ci"]
    lines = [
        f"items labelled: {block['items']}",
        f"agreement: {_pct(block['agreement'])}" + (f" (95% CI {ci[0]:.1%}–{ci[1]:.1%})" if ci else ""),
        f"Cohen's kappa: {_num(block['kappa'])} (95% CI {_num(block['kappa_ci_low'])} to "
        f"{_num(block['kappa_ci_high'])}; Cohen 1960)",
        "confusion matrix (rows: automatic verdict, columns: human label):",
    ]
    return lines + _matrix(block["confusion"])


def format_judge_report(report: dict[str, Any], human: dict[str, Any]) -> str:
    """``report`` (``alignment.judge_report``) and ``human``
    (``alignment.human_accuracy``) as the command prints them."""
    lines = [f"Judge report · run {report['run']}", *_alignment_lines(report)]
    hci, aci = human["human_ci"], human["auto_ci"]
    lines.append(
        f"human-verified accuracy: {_pct(human['human_accuracy'])} ({human['human_correct']}/"
        f"{human['labelled']}" + (f"; 95% CI {hci[0]:.1%}–{hci[1]:.1%})" if hci else ")")
    )
    lines.append(
        f"automatic accuracy on the same items: {_pct(human['auto_accuracy'])} ({human['auto_correct']}/"
        f"{human['auto_scored']}" + (f"; 95% CI {aci[0]:.1%}–{aci[1]:.1%})" if aci else ")")
    )
    if human["tags"]:
        lines.append("failure tags: " + ", ".join(f"{t} {n}" for t, n in human["tags"].items()))
    for group in report["groups"]:
        lines.append(f"-- judge {group['judge']} · {group['rubric']}: {group['items']} item(s), "
                     f"agreement {_pct(group['agreement'])}, kappa {_num(group['kappa'])}")  # fmt: skip
    reviewers = report["reviewers"]
    if reviewers:
        lines.append(
            f"between reviewers ({reviewers['method']}, {', '.join(reviewers['reviewers'])}; "
            f"{reviewers['items']} item(s)): {_num(reviewers['kappa'])}"
        )
    lines.append(f"disagreements: {len(report['disagreements'])}")
    for d in report["disagreements"]:
        note = f" — {d['notes'][0]}" if d["notes"] else ""
        lines.append(f"  {d['question_id']} (prediction {d['prediction_id']}): automatic {d['automatic']}, "
                     f"human {d['human']}{note}")  # fmt: skip
    return "\n".join(lines) + "\n"


def _ci(ci: tuple[float, float] | list[float] | None) -> str:
    return f" (95% CI {ci[0]:.1%}–{ci[1]:.1%})" if ci else ""


def corrected_text(corrected: dict[str, Any]) -> str:
    """The judge-corrected accuracy (``evaluation.annotation.corrected``) as
    lines: the three accuracies side by side, then what each means."""
    if not corrected["available"]:
        return f"judge-corrected accuracy: not available — {corrected['reason']}\n"
    c = corrected
    lines = [
        f"Accuracy three ways (random queue(s) {', '.join(c['queues'])}; {c['labelled']} human labels, "
        f"{c['unlabelled']} unlabelled predictions, {c['unscored']} unscored left out):",
        f"  judge's accuracy:        {_pct(c['judge_accuracy'])}{_ci(c['judge_ci'])}",
        f"  human-verified accuracy: {_pct(c['human_accuracy'])}{_ci(c['human_ci'])}",
        f"  judge-corrected (PPI):   {_pct(c['estimate'])}{_ci((c['ci_low'], c['ci_high']))}, lambda "
        f"{c['lam']:.2f}; {c['method']}",
        *(f"  - {text}" for text in c["meanings"].values()),
    ]
    return "\n".join(lines) + "\n"
