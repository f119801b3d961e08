"""`python -m draftlab.config compose [target=NAME profile=NAME key=value ...]`: print params.yaml composed
from conf/ (`make params`; `draftlab.params.compose_text`), every section validated. The arm table sits
above the configuration layer, so arm names are checked by the layers that know it: `draftlab compose`,
`draftlab check` and the check_params stage. Every other command is the console script's (`draftlab
check|exp|decode|explore|...`, draftlab.cli)."""
from __future__ import annotations

import sys

from draftlab.errors import DraftlabError
from draftlab.params import compose_text

USAGE = ("usage: python -m draftlab.config compose [--conf DIR] [target=NAME profile=NAME key=value ...]\n"
         "(--conf: the conf/ folder, default ./conf; from a world's folder: --conf ../../conf)\n"
         "(to validate params.yaml, arm names included: draftlab check [key=value ...])")


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "compose":
        print(USAGE, file=sys.stderr)
        return 2
    args, conf = argv[1:], "conf"
    if args[:1] == ["--conf"] and len(args) > 1:
        conf, args = args[1], args[2:]
    try:
        print(compose_text(args, conf), end="")
    except DraftlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
