"""Verdicts that survive a second look: every comparison of the workbench read from committed per-prompt records,
one unit per figure (named with its count), speed over a mix as total tokens / total time, replicated training read
as a crossed runs x prompts design, a plan's primary pairs under Holm (docs/decisions.md "Verdicts").

records (the per-prompt files, the replicates, their checks) -> reading (the figures) -> render (markdown) ->
blocks (the docs' generated blocks) -> command (`draftlab verdicts`). The statistics are draftlab.stats's."""
