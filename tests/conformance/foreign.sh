#!/usr/bin/env bash
# 2025-11-25 conformance of a foreign server, directly and through tasklift.
set -euo pipefail
