#!/usr/bin/env bash
# Set up (if needed) and run the review-analysis job.
# Without arguments it reads the bundled jobs/data/sample_reviews.jsonl and
# writes out/review_analysis.jsonl. Extra arguments go to the job unchanged.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tools/setup.sh
source "$REPO_ROOT/tools/setup.sh"

cd "$REPO_ROOT"
exec "$REPO_ROOT/.venv/bin/python" -m flink_agents.jobs.review_analysis "$@"
