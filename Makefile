# vllm-autotune. Every user-facing target runs `setup` first, so each works on a fresh machine.
SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin

SCENARIO ?= mixed
TRIALS   ?=
MODEL    ?=
STORAGE  ?=
STUDY    ?=
SAMPLER  ?=
SEED     ?=
WARM_START ?=
URL      ?=
CONFIRM_RUNS ?=
RECALIBRATE ?=
TIMEOUT_MIN ?=
USD_PER_HOUR ?=
DRY_RUN  ?=
WORKERS  ?=
SLOT     ?=
DB_OUTAGE_S ?=
LANDSCAPE ?=
SAMPLERS ?=
SEEDS    ?=
BUDGETS  ?=
PORT     ?=
RECORDS  ?=
CAPACITY_FRACTION ?= 0.25

opt = $(if $(2),$(1) $(2),)
# The URL reaches the commands through the environment: make echoes "$STORAGE", never the
# database password, and the shell passes it as one word whatever characters it holds.
export STORAGE
STORAGE_ARG = $(if $(STORAGE),--storage "$$STORAGE",)
STUDY_ARGS = $(STORAGE_ARG) $(call opt,--study,$(STUDY))
# A built-in scenario's name, or a scenario file's stem.
SCENARIO_NAME = $(basename $(notdir $(SCENARIO)))

.PHONY: setup test test-system test-fast lint lint-imports db db-stop search worker confirm export report dashboard load params bench bench-startup bench-load bench-trial-time bench-search bench-capacity bench-calibration bench-reconfigure bench-fidelity bench-landscape bench-stopping bench-screening bench-plan bench-trace-replay bench-start-anatomy clean

setup:
	@bash scripts/setup.sh

test: test-system setup lint   ## the checks, then every test: tests/unit and tests/integration
	@# the in-process tree on every core (as test-fast) while the system packages install, then
	@# (once they are in) the real-server tree one test at a time
	$(if $(PYTEST_ARGS),bash scripts/setup_system.sh wait && $(BIN)/python -m pytest -q $(PYTEST_ARGS),$(BIN)/python -m pytest -q -n auto --dist loadfile tests/unit && bash scripts/setup_system.sh wait && $(BIN)/python -m pytest -q tests/integration)

# Before setup: the apt installs run beside pip, the lint and tests/unit, which need neither.
test-system:   ## in the background until `make test` waits for them: Debian chromium (tests/integration/test_browser.py), postgresql (test_postgres.py)
	@bash scripts/setup_system.sh start

test-fast: setup lint   ## the checks, then tests/unit (in-process: no vLLM, network, browser, PostgreSQL, subprocess or make) on every core
	$(BIN)/python -m pytest -q -n auto --dist loadfile tests/unit $(PYTEST_ARGS)

lint: setup   ## ruff (lint and format, a product function's parameters), mypy and the package layering, configured in pyproject.toml; a product function's and module's length, mypy's coverage of every product module
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/check_code_limits.py --mypy-coverage

lint-imports: setup   ## the package layering of docs/architecture.md (pyproject: tool.importlinter)
	$(BIN)/lint-imports --no-cache

db: setup   ## a local PostgreSQL under runs/postgres for studies many workers share; prints STORAGE=
	@bash scripts/setup_postgres.sh
	@$(BIN)/autotune db start

db-stop: setup
	$(BIN)/autotune db stop

search: setup
	$(BIN)/autotune search $(SCENARIO) $(call opt,--trials,$(TRIALS)) $(call opt,--model,$(MODEL)) \
		$(call opt,--sampler,$(SAMPLER)) $(call opt,--seed,$(SEED)) $(call opt,--confirm-runs,$(CONFIRM_RUNS)) $(call opt,--workers,$(WORKERS)) \
		$(STUDY_ARGS) $(if $(RECALIBRATE),--recalibrate,) $(call opt,--db-outage-s,$(DB_OUTAGE_S)) $(call opt,--warm-start,$(WARM_START)) \
		$(call opt,--timeout-min,$(TIMEOUT_MIN)) $(call opt,--usd-per-hour,$(USD_PER_HOUR)) $(if $(DRY_RUN),--dry-run,)

worker: setup   ## one more worker on an existing study, from any host: STORAGE=, STUDY=, SLOT=gpu:0
	$(BIN)/autotune worker --storage "$$STORAGE" --study $(STUDY) $(call opt,--slot,$(SLOT)) $(call opt,--model,$(MODEL)) $(call opt,--db-outage-s,$(DB_OUTAGE_S))

confirm: setup   ## the confirmation phase alone on an existing study (resumes): CONFIRM_RUNS=n
	$(BIN)/autotune confirm $(SCENARIO) $(call opt,--model,$(MODEL)) $(call opt,--confirm-runs,$(CONFIRM_RUNS)) $(STUDY_ARGS) \
		$(call opt,--db-outage-s,$(DB_OUTAGE_S))

export: setup
	$(BIN)/autotune export $(SCENARIO) $(STUDY_ARGS)

report: setup
	$(BIN)/autotune report $(SCENARIO) $(STUDY_ARGS)

dashboard: setup   ## PORT= another port than 8080
	$(BIN)/autotune dashboard $(SCENARIO) $(STUDY_ARGS) $(call opt,--port,$(PORT))

load: setup        ## one load run against a running server: make load URL=http://127.0.0.1:8000 SCENARIO=mixed
	$(BIN)/autotune load $(SCENARIO) --url $(URL)

params: setup
	$(BIN)/autotune params $(call opt,--model,$(MODEL))

# The maintained benchmarks (docs/benchmarks.md: what each answers, how long it takes). Those
# marked "servers" start real vLLM servers: run them under `flock /tmp/vllm.lock` on a shared machine.
bench: bench-startup bench-load bench-trial-time

bench-startup: setup   ## servers: start-to-healthy time of vLLM on the built-in model, eager and compiled
	$(BIN)/python -m benchmarks.bench_startup

bench-start-anatomy: setup   ## servers: where a start's seconds go, the tuner's path cold and warm against vLLM as it is (runs/start-anatomy)
	$(BIN)/python -m benchmarks.bench_start_anatomy --out runs/start-anatomy $(call opt,--model,$(MODEL))

bench-load: setup   ## the load generator's capacity against a stub, then parity with `vllm bench serve` (servers)
	$(BIN)/python -m benchmarks.bench_load_capacity
	$(BIN)/python -m benchmarks.bench_load_parity

bench-sessions: setup   ## servers: prefix caching on and off under chat_sessions, TTFT by turn and the reuse against the hit rate (~10 min)
	$(BIN)/python -m benchmarks.bench_sessions

bench-capacity: setup   ## servers: capacity under the SLO of vLLM's defaults and max_num_seqs 2, 3 fresh starts each (~18 min)
	$(BIN)/python -m benchmarks.bench_capacity --scenario $(SCENARIO)

bench-calibration: setup   ## servers: SCENARIO's calibration on fresh servers, without and with its warm-up, 4 each interleaved (~13 min); CPU_QUOTA= runs the servers in that many cores
	$(BIN)/python -m benchmarks.bench_calibration --scenario $(SCENARIO) $(call opt,--server-cpu-quota,$(CPU_QUOTA))

# At mixed's own target (0.4 of the calibrated capacity) every A/B configuration misses the short-TTFT
# bound, so their capacity would never be compared; at 0.25 they meet it (docs/measurement.md).
bench-reconfigure: setup   ## servers: a reconfigured server against fresh starts, 7 configs x 3 repeats (the A/B of screening without a restart, ~70 min); CAPACITY_FRACTION=
	$(BIN)/python -m benchmarks.bench_reconfigure --scenario $(SCENARIO) --capacity-fraction $(CAPACITY_FRACTION)

bench-fidelity: setup   ## a stored study's screened values against its confirmed ones; STORAGE=, STUDY=
	$(BIN)/python -m benchmarks.bench_fidelity $(if $(STORAGE),--storage "$$STORAGE",--storage sqlite:///runs/autotune.db) $(call opt,--study,$(if $(STUDY),$(STUDY),$(SCENARIO)))

bench-search: setup   ## every sampler x 20 seeds x budgets 5-40 (GP: 8 seeds x 20) on the replay executor (no vLLM); LANDSCAPE=, SAMPLERS=, SEEDS=, BUDGETS= narrow it
	$(BIN)/python -m benchmarks.bench_search $(call opt,--landscape,$(LANDSCAPE)) $(call opt,--samplers,$(SAMPLERS)) \
		$(call opt,--seeds,$(SEEDS)) $(call opt,--budgets,$(BUDGETS))

bench-landscape: setup   ## servers: record SCENARIO's space for bench-search (resumable, ~77 min here), export to LANDSCAPE= (default runs/landscape-SCENARIO.json)
	$(BIN)/python -m benchmarks.bench_landscape record --scenario $(SCENARIO) $(STORAGE_ARG)
	$(BIN)/python -m benchmarks.bench_landscape export $(STORAGE_ARG) --study landscape-$(SCENARIO_NAME) \
		--out $(if $(LANDSCAPE),$(LANDSCAPE),runs/landscape-$(SCENARIO_NAME).json)

bench-trial-time: setup   ## where a stored study's trial time went (start, stages, aborts, stop); STORAGE=, STUDY=
	$(BIN)/python -m benchmarks.bench_trial_time $(STUDY_ARGS)

bench-stopping: setup   ## the early-abort rules replayed over stored load stages; STORAGE=, STUDY= (default: every study)
	$(BIN)/python -m benchmarks.bench_stopping $(STUDY_ARGS)

bench-screening: setup   ## how long the screening's target stage must be to agree with the confirmation; STORAGE=, STUDY=
	$(BIN)/python -m benchmarks.bench_screening_length $(STORAGE_ARG) --study $(if $(STUDY),$(STUDY),$(SCENARIO))

bench-plan: setup   ## this build's plan of a stored study (both of the baselines' cases, the re-plan) against what it took; STORAGE=, STUDY=
	$(BIN)/python -m benchmarks.plan_check $(STORAGE_ARG) --study $(if $(STUDY),$(STUDY),$(SCENARIO))

bench-trace-replay: setup   ## a trace replay's planned window against what the server received; SCENARIO=trace scenario, RECORDS= or STORAGE= STUDY=
	$(BIN)/python -m benchmarks.bench_trace_replay $(SCENARIO) $(call opt,--load,$(RECORDS)) $(STUDY_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
