"""`python -m draftlab.config compose|check ...`: the command lives in draftlab.params."""
from draftlab.params import main

raise SystemExit(main())
