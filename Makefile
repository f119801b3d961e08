# draftlab: two commands. `make repro` installs everything and runs the default pipeline;
# `make test` installs what the tests need and runs them (unit tests + the pipeline on the smoke profile).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.draftlab-installed
export PATH := $(abspath $(VENV))/bin:$(PATH)
export DVC_NO_ANALYTICS := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONWARNINGS := ignore

.PHONY: install repro test unit smoke interpret explore mlflow-ui params dvc-yaml clean-smoke gpu-check gpu-check-dry gpu-run gpu-run-dry gpu-rehearse gpu-pack check exp speculators-env

install: $(STAMP)

# torch first, so that lightning and the rest find it installed. TORCH picks PyTorch's wheel index for the build:
# empty (default) = plain `pip install torch==2.13.0` from the configured index (pip's own settings decide: a CPU
# index where one is configured, else PyPI's default build); TORCH=cpu or TORCH=cu130 (cu126, cu128, ...) = PyTorch's
# own index https://download.pytorch.org/whl/$(TORCH) for the CPU or that CUDA version (docs/install.md).
# An existing venv keeps the torch it has (its stamp is up to date): to switch builds, `rm -rf .venv` first.
# Every pip step stops `make` with one line when it fails (pipefail: pip's exit code, not the filter's). Both
# installers byte-compile at install: this machine sets PYTHONDONTWRITEBYTECODE=1, so a module left uncompiled would be
# compiled again by every process that imports it (the unit tests: +240 s with `pip install --no-compile`).
TORCH ?=
TORCH_INDEX := $(if $(TORCH),--index-url https://download.pytorch.org/whl/$(TORCH),)
QUIET := { grep -v "is ignored" || true; }
STEP = set -o pipefail; $(1) 2>&1 | $(QUIET) || { echo "error: make install: '$(strip $(1))' failed (its output is above); fix that and run make install again" >&2; exit 1; }
TORCH_BUILD := import torch; print(f"installed torch {torch.__version__}: " + (f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build" if not torch.version.hip else f"ROCm {torch.version.hip} build"))

# INSTALLER=uv (the default): the same four steps with uv (pinned, itself installed by pip into the venv; pip's
# find-links honoured), byte-compiled at install as pip does: 47 s against pip's 135 s for a fresh venv here
# (2026-12-07, 2 cores). Where uv cannot be installed or one of its steps fails, the steps run again with pip, and
# INSTALLER=pip uses pip alone.
INSTALLER ?= uv
UV_VERSION := 0.13.9
UV = $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS),)
TRY_UV = $(if $(filter uv,$(INSTALLER)),( set -o pipefail; $(PIP) install -q uv==$(UV_VERSION) 2>&1 | $(QUIET) && \
	$(UV) $(TORCH_INDEX) torch==2.13.0 && $(UV) -r requirements.txt && $(UV) --no-deps -r requirements-nodeps.txt && \
	$(UV) --no-deps -e . ),false)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	@case "$(TORCH)" in ""|cpu|cu[0-9]*|rocm[0-9]*) ;; *) echo "error: TORCH=$(TORCH) is not a PyTorch wheel index: use cpu, cu126, cu128, cu130 (CUDA) or rocm6.4, or leave it empty" >&2; exit 2;; esac
	@case "$(INSTALLER)" in uv|pip) ;; *) echo "error: INSTALLER=$(INSTALLER) is not an installer: use uv (the default) or pip" >&2; exit 2;; esac
	test -x $(PY) || python3 -m venv $(VENV)
	@if $(TRY_UV); then echo "installed with uv $(UV_VERSION)"; else \
	  [ "$(INSTALLER)" = pip ] || echo "uv did not install (its output is above): installing with pip"; \
	  $(call STEP,$(PIP) install $(TORCH_INDEX) torch==2.13.0); \
	  $(call STEP,$(PIP) install -r requirements.txt); \
	  $(call STEP,$(PIP) install --no-deps -r requirements-nodeps.txt); \
	  $(call STEP,$(PIP) install --no-deps -e .); fi
	$(PY) -c "import torch, lightning, transformers, mlflow, dvc, draftlab"
	@$(PY) -c '$(TORCH_BUILD)'
	touch $(STAMP)

.dvc:
	git rev-parse --git-dir >/dev/null 2>&1 || git init -q
	dvc init -q

repro: install .dvc
	dvc repro

# Unit tests (TEST_WORKERS pytest-xdist processes, one test file each at a time; every test is single-threaded),
# then Triton kernels under the interpreter (own process), then the smoke pipeline; the 15 slowest tests are listed (the
# suite has a 12-minute budget on a fresh clone of a 2-core machine, the install included: a new slow test shows there;
# tests/durations.json holds the slowest tests' costs, measured by tools/test_durations.py). OMP_WAIT_POLICY is set
# here, not by draftlab.omp.configure (the stages' one place): pytest's workers import torch before any test could set it.
TEST_WORKERS ?= 2
test: install
	OMP_WAIT_POLICY=PASSIVE DRAFTLAB_INSTALL_CHROMIUM=1 $(PY) -m pytest tests --ignore=tests/kernels -n $(TEST_WORKERS) --dist loadfile --durations=15
	@if ls tests/kernels/test_*.py >/dev/null 2>&1; then TRITON_INTERPRET=1 $(PY) -m pytest tests/kernels -m interpret; fi
	$(MAKE) --no-print-directory smoke

unit: install
	$(PY) -m pytest tests --ignore=tests/kernels

# The whole DVC pipeline on the smoke profile, in a scratch copy (never touches committed metrics).
smoke: install
	$(PY) tools/smoke.py

params:
	$(VENV)/bin/draftlab compose > params.yaml

# dvc.yaml and worlds/*/dvc.yaml, written from the stage table (src/draftlab/pipeline/table.py): run it after
# changing the table or a stage's imports (tests/pipeline/test_dvc_yaml.py fails until you do).
dvc-yaml:
	$(PY) -m draftlab.pipeline.dvcgen

# Validate params.yaml (ARGS: key=value overrides, or -S overrides composed as `dvc exp run -S` does), in one line.
check: install
	$(VENV)/bin/draftlab check $(ARGS)

# `dvc exp run` after the same check, so a typo is one line and nothing runs: make exp ARGS='-S pretrain.lr=3e-3 -n lr3e-3'
exp: install
	$(VENV)/bin/draftlab exp $(ARGS)

# The one prepared accelerator check (tools/gpu_check.py; README "On an accelerator machine"). It needs no venv:
# on the accelerator the system python (torch, triton, transformers) runs it. Extra flags: ARGS='--out-dir DIR'.
# `gpu-check-dry` runs the same code at tiny sizes on CPU (tests/checks/test_gpu_check.py runs it in CI).
GPU_PY := $(if $(wildcard $(PY)),$(PY),python3)
gpu-check:
	$(GPU_PY) tools/gpu_check.py $(ARGS)

gpu-check-dry:
	$(GPU_PY) tools/gpu_check.py --dry $(ARGS)

# The regime run (docs/gpu.md "The regime run (gpu-small)"): `gpu-pack` here writes gpu-pack/ (prompts, wheels, the
# target GGUF in parts, each <= 64 MiB); `gpu-run` on the offline device runs every stage of PROFILE without DVC or
# MLflow and writes the results bundle to OUT; `gpu-run-dry` rehearses it at tiny sizes on CPU. Back here:
# $(GPU_PY) tools/gpu_run.py --render OUT
PROFILE ?= gpu-small
OUT ?= gpu-out
gpu-pack:
	$(PY) tools/gpu_pack.py --profile $(PROFILE) $(ARGS)

gpu-run:
	$(GPU_PY) tools/gpu_run.py --profile $(PROFILE) --out $(OUT) $(ARGS)

gpu-run-dry:
	$(GPU_PY) tools/gpu_run.py --dry --profile $(PROFILE) --out $(OUT)-dry $(ARGS)

# The full-size rehearsal of the regime run (docs/gpu.md, not in `make test`): the real pack, every stage on the real
# selection, prompt lengths and step shapes, in a venv with the accelerator's transformers and lightning (torch 2.13
# CPU stands in for its 2.11, which does not install here); batches capped to fit 24 GiB of RAM, steps and new tokens
# capped to run in <= 30 minutes on 2 cores. The caps go to the pack too (its selection digest covers the section).
REHEARSE_VENV ?= .v517
REHEARSE_CAPS ?= -S reference.batch_size=64 -S reference.max_new_tokens=32 \
  -S pretrain.max_steps=2 -S pretrain.max_minutes=5 -S pretrain.batch_size=2 -S pretrain.val_every=0 \
  -S seeded.pretrain.max_steps=2 -S seeded.pretrain.max_minutes=5 \
  -S specopd.max_steps=2 -S specopd.max_minutes=5 -S specopd.batch_size=2 -S specopd.val_every=0 \
  -S corrector.max_steps=2 -S corrector.max_minutes=5 -S corrector.variant_max_minutes=5 -S corrector.batch_size=2 \
  -S corrector.val_every=0 -S benchmark.max_new_tokens=8 -S benchmark.concurrency_max_new_tokens=8
gpu-rehearse: install
	test -x $(REHEARSE_VENV)/bin/python || python3 -m venv $(REHEARSE_VENV)
	$(REHEARSE_VENV)/bin/python -c "import transformers, lightning; assert transformers.__version__ == '5.17.0'" 2>/dev/null || { \
	  $(REHEARSE_VENV)/bin/python -m pip --disable-pip-version-check -q install torch==2.13.0 && \
	  $(REHEARSE_VENV)/bin/python -m pip --disable-pip-version-check -q install transformers==5.17.0 lightning==2.6.6 \
	    pandas pyarrow safetensors numpy; }
	$(PY) tools/gpu_pack.py --profile gpu-small --out gpu-pack-rehearsal $(REHEARSE_CAPS)
	$(REHEARSE_VENV)/bin/python tools/gpu_run.py --pack gpu-pack-rehearsal --out gpu-out-rehearsal \
	  --work gpu-work-rehearsal --deadline 1800 $(REHEARSE_CAPS)

# The explorer on 127.0.0.1:8501; ROOT=.smoke shows the smoke run's outputs.
ROOT ?= .
explore: install
	$(VENV)/bin/draftlab explore --root $(ROOT)

# The MLflow UI on 127.0.0.1:5000 over an existing store (MLFLOW_DB=.smoke/mlruns.db: the smoke run's); a missing
# store is an error, not a new empty one. MLflow 3 starts in its GenAI mode ("No data" for these runs), so it first
# prints each experiment's runs list in its "Model training" mode: #/experiments/<id>/runs?workflowType=machine_learning (docs/install.md).
MLFLOW_DB ?= mlruns.db
MLFLOW_RUNS_URLS := import sqlite3, sys; c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True); \
  rows = c.execute("select e.experiment_id, e.name from experiments e where e.lifecycle_stage = ? and exists (select 1 from runs r where r.experiment_id = e.experiment_id) order by e.experiment_id", ("active",)).fetchall(); \
  [print(f"runs of experiment {n!r}: http://127.0.0.1:5000/\#/experiments/{i}/runs?workflowType=machine_learning") for i, n in rows] or print("no runs in the store yet")
mlflow-ui: install
	@test -f $(MLFLOW_DB) || { echo "error: no MLflow store at $(MLFLOW_DB) yet: every stage logs a run there (make repro, or make smoke and MLFLOW_DB=.smoke/mlruns.db)" >&2; exit 2; }
	@$(PY) -c '$(MLFLOW_RUNS_URLS)' $(MLFLOW_DB)
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow server --backend-store-uri sqlite:///$(abspath $(MLFLOW_DB)) --host 127.0.0.1 --port 5000 --workers 1

# vLLM's speculators 0.9.0 (its DFlash converter) in a separate venv: it pins transformers<=5.19, the project runs
# 5.24. tests/drafter/test_export_speculators.py runs the converter on an export when $(SPEC_VENV) exists (docs/export.md).
SPEC_VENV ?= .specenv
SPEC_PIP := $(SPEC_VENV)/bin/python -m pip --disable-pip-version-check -q
speculators-env:
	test -x $(SPEC_VENV)/bin/python || python3 -m venv $(SPEC_VENV)
	@$(call STEP,$(SPEC_PIP) install $(TORCH_INDEX) torch==2.13.0)
	@$(call STEP,$(SPEC_PIP) install --no-deps speculators==0.9.0 hs-connectors==0.9.0)
	@$(call STEP,$(SPEC_PIP) install -r requirements-speculators.txt)
	$(SPEC_VENV)/bin/python -c "import speculators.convert.entrypoints"

clean-smoke:
	rm -rf .smoke
