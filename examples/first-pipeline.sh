#!/usr/bin/env bash
# The README's first pipeline, as one script: start the server, publish examples/, run the pipeline on the
# platform-hosted agent (the warehouse is its embedded DuckDB), follow it to its end, show its steps (the
# mart's row count among them), then run the example's test pipeline on the mart. Needs only `npm install`.
set -euo pipefail
cd "$(dirname "$0")/.."
field() { node -e 'let v = JSON.parse(require("fs").readFileSync(0, "utf8")); process.stdout.write(String(v[process.argv[1]]))' "$1"; }

export DPC_URL="http://127.0.0.1:${PORT:-8080}"
CREDENTIALS=$(npx dpc accounts create --name "First pipeline")
export DPC_CLIENT_ID=$(echo "$CREDENTIALS" | field clientId) DPC_CLIENT_SECRET=$(echo "$CREDENTIALS" | field clientSecret)
npx dpc serve > "${TMPDIR:-/tmp}/dpc-server.log" 2>&1 &
until node -e "fetch('$DPC_URL/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"; do sleep 1; done

PROJECT_ID=$(npx dpc api POST /v1/projects --data '{"name":"First pipeline"}' | field projectId)
npx dpc api POST "/v1/projects/$PROJECT_ID/environments" --data '{"name":"dev"}' > /dev/null
npx dpc publish examples --project "$PROJECT_ID" --environment dev --version 1.0.0

RUN_ID=$(npx dpc api POST "/v1/projects/$PROJECT_ID/pipeline-executions" \
  --data '{"pipelineName":"pipelines/load-orders","environmentName":"dev"}' | field pipelineExecutionId)
STATUS=RUNNING
while [ "$STATUS" = RUNNING ]; do
  sleep 1
  STATUS=$(npx dpc api GET "/v1/projects/$PROJECT_ID/pipeline-executions/$RUN_ID/status" | field status)
done
echo "pipeline: $STATUS"
npx dpc api GET "/v1/projects/$PROJECT_ID/pipeline-executions/$RUN_ID/steps" | node -e '
  for (const step of JSON.parse(require("fs").readFileSync(0, "utf8")).results)
    console.log(`${step.name.padEnd(16)} ${step.result.status.padEnd(8)} ${step.result.message ?? ""}`);'

TEST_ID=$(npx dpc api POST "/v1/projects/$PROJECT_ID/test-executions" \
  --data '{"environmentName":"dev","scope":"PROJECT"}' | field testExecutionId)
STATUS=RUNNING
while [ "$STATUS" = RUNNING ]; do
  sleep 1
  STATUS=$(npx dpc api GET "/v1/projects/$PROJECT_ID/test-executions/$TEST_ID" | field status)
done
echo "tests: $STATUS"
