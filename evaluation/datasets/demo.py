"""A tiny demo dataset, written for AgentLab (no third-party text, no licence to carry).

Eight examples in the same shapes as the shared benchmark subsets
(datasets/): 3 ``math`` word problems with integer answers (scored
``numeric``), 3 ``multiple_choice`` questions laid out like
``arc-challenge-test-100.jsonl`` (stem, blank line, ``A. ...`` one option per
line; answer a letter; scored ``choice``), and 2 ``document_qa`` questions whose
short documents are in ``context["documents"]`` as ``[{"title", "text"}]`` like
HotpotQA's (scored ``exact``; the second needs two documents). They are meant to
be easy enough that a 135M-parameter model gets one or two right, so that a demo
run shows a non-trivial accuracy.
"""

from __future__ import annotations

from evaluation.datasets.names import DEMO_DATASET_NAME
from evaluation.datasets.spec import ExampleSpec

__all__ = ["DEMO_DATASET_NAME", "demo_examples"]


def _multiple_choice(external_id: str, stem: str, choices: list[str], answer: str) -> ExampleSpec:
    letters = "ABCDEFGHIJ"
    options = "\n".join(f"{letters[i]}. {option}" for i, option in enumerate(choices))
    return ExampleSpec(
        external_id=external_id,
        question=f"{stem}\n\n{options}",
        answer=answer,
        task_type="multiple_choice",
        choices=choices,
    )


def _math_examples() -> list[ExampleSpec]:
    """Word problems with integer answers (``demo-math-1..3``)."""
    return [
        ExampleSpec(
            external_id="demo-math-1",
            question=(
                "Tom has 3 apples. His friend gives him 4 more apples. How many apples does Tom have now?"
            ),
            answer="7",
            task_type="math",
        ),
        ExampleSpec(
            external_id="demo-math-2",
            question="A box holds 6 eggs. How many eggs are there in 2 boxes?",
            answer="12",
            task_type="math",
        ),
        ExampleSpec(
            external_id="demo-math-3",
            question=(
                "Sara had 10 pencils. She gave 4 pencils to her brother. "
                "How many pencils does Sara have left?"
            ),
            answer="6",
            task_type="math",
        ),
    ]


def _choice_examples() -> list[ExampleSpec]:
    """Multiple-choice questions (``demo-mc-1..3``)."""
    return [
        _multiple_choice(
            "demo-mc-1",
            "What do plants need from the Sun to make their food?",
            ["Light", "Sand", "Snow", "Noise"],
            "A",
        ),
        _multiple_choice(
            "demo-mc-2",
            "Which of these animals can fly?",
            ["A dog", "A fish", "A bird", "A cow"],
            "C",
        ),
        _multiple_choice(
            "demo-mc-3",
            "What is frozen water called?",
            ["Steam", "Ice", "Smoke", "Rain"],
            "B",
        ),
    ]


def _document_examples() -> list[ExampleSpec]:
    """Questions answered from the documents they come with (``demo-doc-1..2``)."""
    return [
        ExampleSpec(
            external_id="demo-doc-1",
            question="In which year did the Maple Street Library open?",
            answer="1952",
            task_type="document_qa",
            context={
                "documents": [
                    {
                        "title": "Maple Street Library",
                        "text": (
                            "The Maple Street Library opened in 1952. It is open every day except Monday."
                        ),
                    },
                    {
                        "title": "Town Park",
                        "text": "Town Park has a small lake and a playground. The park closes at 8 pm.",
                    },
                ]
            },
        ),
        ExampleSpec(
            external_id="demo-doc-2",
            question="What colour is the house where Bella the cat lives?",
            answer="blue",
            task_type="document_qa",
            context={
                "documents": [
                    {
                        "title": "Bella the cat",
                        "text": (
                            "Bella is a grey cat. She lives with the Lee family "
                            "and likes to sleep on the sofa."
                        ),
                    },
                    {
                        "title": "Max the dog",
                        "text": "Max is a brown dog who lives next door. He loves to play fetch.",
                    },
                    {
                        "title": "The Lee family",
                        "text": "The Lee family lives in a blue house next to the river.",
                    },
                ]
            },
        ),
    ]


def demo_examples() -> list[ExampleSpec]:
    """The demo dataset's examples, in a fixed order (new objects on each call).

    Returns 8 :class:`ExampleSpec`: ids ``demo-math-1..3``, ``demo-mc-1..3``,
    ``demo-doc-1..2``; ``scorer`` is ``None`` on all (task-type defaults apply)."""
    return [*_math_examples(), *_choice_examples(), *_document_examples()]
