import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AgentWorkReports } from '../../src/areas/agents/work-reports.ts';
import { ALL_WORK_KINDS, WORK_KINDS } from '../../src/contract/work.ts';
import { TestServer } from '../helpers/harness.ts';

test('the report registry takes one handler per contract kind, and says which kinds lack one', async () => {
  const reports = new AgentWorkReports();
  const handler = async () => {};
  assert.throws(() => reports.on('no-such-kind' as never, handler), /not a work kind of the contract/);
  reports.on(WORK_KINDS.writeSecret, handler);
  assert.throws(() => reports.on(WORK_KINDS.writeSecret, handler), /already has a report handler/);
  assert.equal(reports.handlerOf(WORK_KINDS.writeSecret), handler);
  assert.throws(() => reports.handlerOf(WORK_KINDS.executePipeline), /no report handler for work kind "execute-pipeline"/);
  assert.throws(() => reports.assertComplete(), new RegExp(`without a report handler: ${WORK_KINDS.executePipeline}`));
  for (const kind of ALL_WORK_KINDS) if (kind !== WORK_KINDS.writeSecret) reports.on(kind, handler);
  reports.assertComplete();
});

test('a started server has a report handler for every kind of the contract', async () => {
  const server = await TestServer.start('sqlite');
  try {
    for (const kind of ALL_WORK_KINDS) assert.equal(typeof server.server.app.agentWorkReports.handlerOf(kind), 'function', kind);
  } finally {
    await server.close();
  }
});
