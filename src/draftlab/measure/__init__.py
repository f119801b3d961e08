"""Instruments that measure the machine and the methods outside a stage: the verify pass's cost by width and context
(`verify_cost`), serving engines on an exported drafter (`serving_engines`), how many prompts a benchmark needs
(`sizing`, `sizing_report`), the dispatch counts the plan's time model reads (`dispatch_count`) and the pretraining
probes (`probes`)."""
