"""The LLM judge: a grading model reads the question, the gold answer, the
prediction and a rubric and returns a grade.

- ``grader``: the ``judge`` scorer itself — the prompt, the call, reading the
  grade (no Django);
- ``judge_pass``: grading every prediction of a run that awaits the judge,
  from the cache when it can;
- ``services``: the predictions awaiting the judge, its cache, recording a
  grade on a prediction.
"""
