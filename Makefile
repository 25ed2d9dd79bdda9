# Two commands for newcomers: `make demo` and `make test` (both run setup first).
PY := .venv/bin/python
PLANRUNNER := .venv/bin/planrunner

.PHONY: setup demo test lint fixtures bench clean

setup:
	bash scripts/setup.sh

fixtures: setup
	$(MAKE) -C tests/fixtures/elf

demo: fixtures
	$(PLANRUNNER) run plans/sdt-demo.yaml --set demo=$(CURDIR)/tests/fixtures/elf/build/demo \
	    -c '$(CURDIR)/tests/fixtures/elf/build/demo 5'

test: fixtures
	$(PY) -m ruff check planrunner tests bench
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: fixtures
	$(PY) bench/run.py

clean:
	rm -rf .venv tests/fixtures/elf/build
