"""`${path:NAME}` for DVC's own Hydra composition: `dvc exp run -S ...` composes conf/ into params.yaml itself and, before
it does, imports every module under hydra_plugins/ of the repository root (.dvc/config's hydra section; the plugins
path defaults to the root). This module only registers the resolver that draftlab.params registers for
`draftlab compose`, so both compositions resolve a preset's `${path:PLAIN_DRAFTER}` to draftlab.paths.PLAIN_DRAFTER."""
from draftlab.params import register_resolvers

register_resolvers()
