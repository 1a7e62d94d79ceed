"""Counterfactual replay of recorded turns (issue 42; docs/evaluating.md#replaying-recorded-turns):
``selection`` (which recorded turns), ``variant`` (what they are driven
under), ``replay_open`` (the replay, its turns and items written or resumed),
``replay_drive`` (the turns driven through the one driver, the items
completed), ``verdicts`` (a turn against its original, the replay's figures)."""
