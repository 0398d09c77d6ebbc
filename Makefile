# jobfit — the README's two commands are `make demo` and `make test`; both set up what they need first.
# Every step is a file target, so a second run does nothing unless its inputs changed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
# Delta Lake's Spark jars for pyspark 4.2 (Scala 2.13); fetched from Maven Central once, used offline after.
DELTA_VERSION := 4.4.0
DELTA_JARS := io.delta:delta-spark_4.2_2.13:$(DELTA_VERSION) io.delta:delta-storage:$(DELTA_VERSION)
# s3a:// warehouses: hadoop-aws at the Hadoop version pyspark bundles (pyspark/jars/hadoop-client-api-*.jar)
# and the two compile dependencies it declares, at hadoop-project's versions: the AWS SDK v2 bundle (~690 MB,
# aws-java-sdk-v2.version) and the S3 analytics accelerator (amazon-s3-analyticsaccelerator-s3.version).
HADOOP_VERSION := 3.5.0
AWS_SDK_VERSION := 2.35.4
S3_ANALYTICS_VERSION := 1.3.1
S3_JARS := org.apache.hadoop:hadoop-aws:$(HADOOP_VERSION) software.amazon.awssdk:bundle:$(AWS_SDK_VERSION) \
  software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:$(S3_ANALYTICS_VERSION)
JARS_DIR := .jars
APT_PACKAGES := libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 poppler-utils fonts-dejavu-core lua5.4 curl

.PHONY: setup demo test test-fast lint bench lock clean-setup
setup: .cache/apt.stamp $(VENV)/.stamp $(JARS_DIR)/.stamp

.cache/apt.stamp: Makefile
	@mkdir -p .cache
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages: $$missing" >&2; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@touch $@

# Bytecode compiled once at install: uv does not by default, and with PYTHONDONTWRITEBYTECODE set (as on CI) every
# jobfit process and Spark Python worker would compile pandas, pyspark and Great Expectations from source.
$(VENV)/.stamp: requirements.lock pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	@$(BIN)/uv pip sync -q --compile-bytecode --python $(BIN)/python requirements.lock
	@$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@touch $@

# Fetched into .fetch/ and moved in whole, so a session starting meanwhile never loads a half-copied jar.
# The S3 jars go to s3a/: jobfit adds them only for an s3a:// warehouse (every executor fetches spark.jars).
$(JARS_DIR)/.stamp: Makefile
	@command -v mvn >/dev/null || { echo "setup: Maven (mvn) is needed once to fetch Delta's and S3's jars; apt-get install maven" >&2; exit 2; }
	@hadoop=$$(ls $(VENV)/lib/python3*/site-packages/pyspark/jars/hadoop-client-api-*.jar 2>/dev/null | sed -E 's/.*-([0-9.]+)\.jar$$/\1/'); \
	if [ -n "$$hadoop" ] && [ "$$hadoop" != "$(HADOOP_VERSION)" ]; then \
	  echo "setup: pyspark bundles Hadoop $$hadoop; set HADOOP_VERSION (and the S3 jars' versions) in the Makefile to match" >&2; exit 2; \
	fi
	@rm -rf $(JARS_DIR)/.fetch && mkdir -p $(JARS_DIR)/.fetch/s3a $(JARS_DIR)/s3a
	@for a in $(DELTA_JARS) $(S3_JARS); do \
	  case " $(S3_JARS) " in *" $$a "*) out=$(JARS_DIR)/.fetch/s3a;; *) out=$(JARS_DIR)/.fetch;; esac; \
	  mvn -q -B -Dstyle.color=never dependency:copy -Dartifact=$$a -DoutputDirectory=$$out >/dev/null || { echo "setup: could not fetch $$a" >&2; exit 2; }; \
	done
	@mv -f $(JARS_DIR)/.fetch/s3a/*.jar $(JARS_DIR)/s3a/ && mv -f $(JARS_DIR)/.fetch/*.jar $(JARS_DIR)/
	@rm -rf $(JARS_DIR)/.fetch
	@touch $@

demo: setup
	$(BIN)/jobfit demo

# Tests marked `apart` (the standalone cluster, S3, Airflow runs, concurrent and killed jobfit runs: mostly
# waiting on the processes and JVMs they start; the fuzzed row accounting) run in a second pytest process
# beside the rest, with their own temporary folder; their output follows the main run's. Either failing
# fails the target.
test: setup
	$(BIN)/ruff check .
	@mkdir -p .cache
	@$(BIN)/python -m pytest -q -p no:cacheprovider -m apart --basetemp=$${TMPDIR:-/tmp}/jobfit-pytest-apart-$$$$ --durations=10 \
	  > .cache/test-apart.log 2>&1 & apart=$$!; \
	$(BIN)/python -m pytest -q -m "not apart" --durations=15; main=$$?; \
	wait $$apart; rc=$$?; \
	echo "== the tests run apart (pytest -m apart), exit $$rc:"; cat .cache/test-apart.log; \
	exit $$(( main != 0 || rc != 0 ))

# The inner loop: the suite without the tests marked slow (end-to-end runs); `make test` runs them all.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

# Re-resolve requirements.in into requirements.lock (run by a developer, not by setup).
lock: $(VENV)/.stamp
	$(BIN)/uv pip compile -q --python-version 3.11 requirements.in -o requirements.lock

clean-setup:
	rm -rf $(VENV) $(JARS_DIR) .cache/apt.stamp
