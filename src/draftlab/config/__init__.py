"""Typed configuration: one dataclass schema per section of params.yaml, each with its own `check`.

Plain dataclasses, no OmegaConf: loading, validating and composing params.yaml live in
`draftlab.params` (`draftlab compose ...` prints the composition: draftlab.cli).
- `draftlab.config.sections`: target, profile, data, tracking, reference, drafter, `Params`;
- `draftlab.config.benchmark`: the benchmark and pld sections;
- `draftlab.config.training`: pretrain, specopd, corrector and the parts they share (`Budget`,
  `Optim`, `Schedule`, `Batches`, `Validation`, `Run`);
- `draftlab.config.trainer`: the `trainer` section (devices / DDP of the training stages);
- `draftlab.config.seeded`: the `seeded` section (the seeded drafter's overrides of drafter / pretrain);
- `draftlab.config.engine`: the `engine` section (compiled steps, the KV capacity per stream);
- `draftlab.config.checks`: the validators.
Name lists belong to the packages that define them (`draftlab.corrector.variants`,
`draftlab.specopd.objectives`, `draftlab.data.suites.SUITES`): a new variant needs no edit here. The
configuration imports no method: the caller hands the methods' tables in (`MethodNames`,
draftlab.pipeline.names.method_names()) as it hands in the arm names.
"""
from draftlab.config.sections import (  # noqa: F401
    BenchmarkConfig, DataConfig, DrafterConfig, Params, PLDConfig, ProfileConfig, RandomModelConfig, ReferenceConfig,
    TargetArchConfig, TargetConfig, TrackingConfig,
)
from draftlab.config.checks import MethodNames  # noqa: F401
from draftlab.config.engine import EngineConfig  # noqa: F401
from draftlab.config.seeded import SeededConfig  # noqa: F401
from draftlab.config.trainer import TrainerConfig  # noqa: F401
from draftlab.config.training import (  # noqa: F401
    Batches, Budget, CorrectorConfig, EpochBudget, Optim, PretrainConfig, Run, Schedule, SpecOPDConfig, Validation,
)
