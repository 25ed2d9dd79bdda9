# Two commands for newcomers: `make demo` and `make test` (both run setup first).
PY := .venv/bin/python
PLANRUNNER := .venv/bin/planrunner

.PHONY: setup demo test lint fixtures bench clean

setup:
	bash scripts/setup.sh

fixtures: setup
	$(MAKE) -C tests/fixtures/elf

demo: fixtures
	$(PLANRUNNER) run sdt-demo --set demo=tests/fixtures/elf/build/demo \
	    -c 'tests/fixtures/elf/build/demo 8'

test: fixtures
	$(PY) -m ruff check planrunner tests bench
	$(PY) -m mypy
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: fixtures
	$(PY) bench/run.py

clean:
	rm -rf .venv tests/fixtures/elf/build
