"""CI reports of runs, comparisons and experiments (docs/evaluating.md#ci-reports).

- ``junit``: predictions as JUnit XML (pure; the schema Jenkins and GitLab read);
- ``selectors``: a stored run's predictions as JUnit suites;
- ``summary_md``: a run, a comparison or an experiment as a Markdown summary (pure);
- ``outputs``: the ``--junit-xml`` / ``--summary-md`` options, checked before
  the work and written after it (and ``$GITHUB_STEP_SUMMARY``), and the links.
"""
