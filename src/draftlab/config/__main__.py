"""`python -m draftlab.config compose|check ...`: the commands live in draftlab.cli (`draftlab compose|check`)."""
from draftlab.cli import config_main

raise SystemExit(config_main())
