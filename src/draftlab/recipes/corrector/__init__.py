"""The corrector's recipe room (its model room is `draftlab.corrector`): the co-training Lightning module and loop
(`cotrain`), the held-out evaluation of every path rule (`evaluate`) and the stage's recipe (`recipe`: every variant
co-trained from its base drafter, then the dflash-long control). Shared training code comes from `draftlab.training`."""
