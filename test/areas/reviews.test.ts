import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { describeEachStore, expectProblem, TestServer, type Caller } from '../helpers/harness.ts';
import { CHECKING, insertAgent, orchestration, runsChild, uploadVersion } from '../helpers/executions.ts';

/** A pipeline with one of everything a review finds. */
const FLAWED = orchestration(
  `    Start:
      type: "start"
      transitions:
        unconditional: ["Load"]
    Load:
      type: "sql-executor"
      parameters:
        sqlScript: "insert into marts.orders select * from \${source_table} where region = '\${regoin}'"
      transitions:
        success: ["Count"]
    Count:
      type: "query-to-scalar"
      parameters:
        query: "select count(* from marts.orders"
        scalarVariableMapping:
          - ["row_count", "count"]
      transitions:
        success: ["Child"]
    Child:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "pipelines/missing"
      transitions:
        success: ["Call API"]
    Call API:
      type: "sql-executor"
      parameters:
        sqlScript: "select 1"
        connectionUrl: "https://api.example.com/v1?api_key=sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    Forgotten:
      type: "print-variables"
    Empty:
      type: "sql-executor"
`,
  `  variables:
    source_table:
      metadata: {type: "TEXT", scope: "COPIED", visibility: "PUBLIC"}
      defaultValue: "staging.orders"
`,
);

describeEachStore('pipeline quality review', (kind) => {
  let server: TestServer;
  let caller: Caller;
  let viewer: string;
  let projectId: string;

  const review = (body: unknown, token = viewer, project = projectId) =>
    server.api('POST', `/projects/${project}/reviews`, { token, body });

  before(async () => {
    server = await TestServer.start(kind);
    ({ caller, viewer, projectId } = await server.prologue({ environments: ['prod'] }));
    const region = { name: 'region', type: 'TEXT', behaviour: 'SHARED', value: 'eu' };
    assert.equal(
      (await server.api('POST', `/projects/${projectId}/variables`, { token: caller.token, body: region })).status,
      201,
    );
    await uploadVersion(server, caller, projectId, 'prod', 'v1', {
      'pipelines/check.orch.yaml': CHECKING,
      'pipelines/flawed.orch.yaml': FLAWED,
    });
  });
  after(() => server.close());

  test('a published version: every rule finds its flaw, naming file, component and parameter; a clean file has none', async () => {
    const answer = await review({ environmentName: 'prod' });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.versionName, 'v1');
    assert.deepEqual(answer.body.files, ['pipelines/check.orch.yaml', 'pipelines/flawed.orch.yaml']);
    const found = answer.body.findings.map((f: any) => [f.rule, f.severity, f.component ?? null, f.parameter ?? null]);
    assert.deepEqual(
      found.filter((f: any[]) => f[0] !== 'sql-syntax'),
      [
        ['credential-in-parameter', 'ERROR', 'Call API', 'connectionUrl'],
        ['undeclared-variable', 'ERROR', 'Count', 'scalarVariableMapping'],
        ['missing-parameter', 'ERROR', 'Empty', 'sqlScript'],
        ['unknown-variable', 'ERROR', 'Load', 'sqlScript'],
        ['unknown-pipeline', 'ERROR', 'Child', 'orchestrationJob'],
        ['unreachable-component', 'WARNING', 'Empty', null],
        ['unreachable-component', 'WARNING', 'Forgotten', null],
      ].sort(
        (a, b) =>
          (a[1] as string).localeCompare(b[1] as string) ||
          String(a[2]).localeCompare(String(b[2])) ||
          String(a[0]).localeCompare(String(b[0])),
      ),
    );
    const syntax = answer.body.findings.filter((f: any) => f.rule === 'sql-syntax');
    assert.deepEqual(
      syntax.map((f: any) => [f.severity, f.component, f.parameter]),
      [['ERROR', 'Count', 'query']],
      'the SQL with a known variable parses with its default value; the misspelt SELECT does not',
    );
    assert.ok(answer.body.findings.every((f: any) => f.file === 'pipelines/flawed.orch.yaml'));
    assert.ok(!answer.text.includes('sk_live_4eC39HqLyjWDarjtT1zdp7dc'), 'a credential found is never quoted');
    // The project variable `region` is known; the misspelt `regoin` is not.
    assert.ok(answer.body.findings.some((f: any) => f.message.includes('${regoin}')));
    assert.ok(!answer.body.findings.some((f: any) => f.message.includes('${region}')));
    assert.equal(answer.body.errors, answer.body.findings.filter((f: any) => f.severity === 'ERROR').length);
    assert.equal(answer.body.warnings, 2);
  });

  test('uploaded files are reviewed without publishing them; cycles and broken graphs are findings', async () => {
    const a = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Run b"]
    Run b:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "b"
`);
    const b = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Run a"]
    Run a:
      type: "run-orchestration"
      parameters:
        orchestrationJob: "a.orch.yaml"
`);
    const c = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Nowhere"]
`);
    const answer = await review({
      environmentName: 'prod',
      files: {
        'a.orch.yaml': a,
        'b.orch.yaml': b,
        'c.orch.yaml': c,
        'broken.orch.yaml': 'pipeline: [',
        'README.md': '# not a pipeline',
      },
    });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.body.versionName, undefined);
    assert.deepEqual(answer.body.files, ['a.orch.yaml', 'b.orch.yaml', 'broken.orch.yaml', 'c.orch.yaml']);
    const rules = answer.body.findings.map((f: any) => `${f.file} ${f.rule}`);
    assert.ok(rules.includes('a.orch.yaml pipeline-cycle'), rules.join('\n'));
    assert.ok(rules.includes('c.orch.yaml invalid-graph'), rules.join('\n'));
    assert.ok(rules.includes('broken.orch.yaml invalid-file'), rules.join('\n'));
  });

  test("SQL is checked in the grammar of the environment's warehouse: Snowflake's for snowflake, PostgreSQL's for postgres", async () => {
    for (const [name, type] of [
      ['on-snowflake', 'snowflake'],
      ['on-postgres', 'postgres'],
    ]) {
      const created = await server.api('POST', `/projects/${projectId}/environments`, {
        token: caller.token,
        body: { name, warehouse: { type } },
      });
      assert.equal(created.status, 201, created.text);
    }
    const pipeline = (sql: string) =>
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Load"]
    Load:
      type: "sql-executor"
      parameters:
        sqlScript: "${sql}"
`);
    const files = {
      'snowflake.orch.yaml': pipeline(
        'select * from raw.orders qualify row_number() over (partition by id order by at desc) = 1',
      ),
      'postgres.orch.yaml': pipeline("select * from raw.orders where region ~ '^eu'"),
    };
    const syntax = async (environmentName: string) => {
      const answer = await review({ environmentName, files });
      assert.equal(answer.status, 200, answer.text);
      return answer.body.findings
        .filter((f: any) => f.rule === 'sql-syntax')
        .map((f: any) => `${f.file} ${f.severity} ${f.message.split(':')[0]}`);
    };
    assert.deepEqual(await syntax('on-snowflake'), ['postgres.orch.yaml ERROR does not parse as snowflake SQL (line 1)']);
    assert.deepEqual(await syntax('on-postgres'), ['snowflake.orch.yaml ERROR does not parse as postgresql SQL (line 1)']);
    // No warehouse declared: the agent's own (DuckDB or PostgreSQL), PostgreSQL's grammar.
    assert.deepEqual(await syntax('prod'), ['snowflake.orch.yaml ERROR does not parse as postgresql SQL (line 1)']);
  });

  test("before a run starts: the review's errors refuse it (400 naming file, component, parameter and rule), warnings do not", async () => {
    const typo = runsChild('pipelines/child');
    const child = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Say"]
    Say:
      type: "print-variables"
      parameters:
        prefixText: "\${regoin}"
`);
    const warned = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Say"]
    Say:
      type: "print-variables"
      parameters:
        prefixText: "\${region}"
    Forgotten:
      type: "print-variables"
`);
    await server.api('POST', `/projects/${projectId}/environments`, { token: caller.token, body: { name: 'runs' } });
    await uploadVersion(server, caller, projectId, 'runs', 'v1', {
      'pipelines/typo.orch.yaml': typo,
      'pipelines/child.orch.yaml': child,
      'pipelines/warned.orch.yaml': warned,
    });
    const agentId = await insertAgent(server, caller.accountId);
    const start = (pipelineName: string) =>
      server.api('POST', `/projects/${projectId}/pipeline-executions`, {
        token: caller.token,
        body: { pipelineName, environmentName: 'runs', agentId },
      });
    // The error is in the child the pipeline runs.
    const refused = expectProblem(await start('pipelines/typo'), 400);
    assert.deepEqual(refused.violations, [
      'pipelines/child.orch.yaml: components.Say.parameters.prefixText: ${regoin} is not a variable of the pipeline or the project (unknown-variable)',
    ]);
    assert.match(refused.detail, /the review finds an error/);
    const runs = await server.api('GET', `/pipeline-executions?projectId=${projectId}&environmentName=runs`, {
      token: caller.token,
    });
    assert.equal(runs.body.results.length, 0, 'a refused run leaves nothing');
    // An unreachable component is a warning: the run starts.
    assert.equal((await start('pipelines/warned')).status, 201);
  });

  test('SQL that would take the parser minutes is not checked past its time, and the server answers others meanwhile', async () => {
    // Each of these takes node-sql-parser seconds to minutes (its backtracking grows exponentially with the brackets).
    const slow = [
      `SELECT ${'('.repeat(16)}1`,
      `SELECT ${'('.repeat(14)}1 +${')'.repeat(14)}`,
      `SELECT ${'CASE WHEN ('.repeat(12)}1`,
    ];
    const file = orchestration(
      `    Start:
      type: "start"
      transitions:
        unconditional: ["Slow 0"]
${slow
  .map(
    (sql, i) => `    Slow ${i}:
      type: "sql-executor"
      parameters:
        sqlScript: ${JSON.stringify(sql)}
      transitions:
        success: ["${i + 1 < slow.length ? `Slow ${i + 1}` : 'Fine'}"]
`,
  )
  .join('')}    Fine:
      type: "sql-executor"
      parameters:
        sqlScript: "select 1"
`,
    );
    const started = performance.now();
    const answer = review({ environmentName: 'prod', files: { 'slow.orch.yaml': file } });
    // The event loop is free while the review waits: a health check answers at once.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const healthStarted = performance.now();
    assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
    assert.ok(performance.now() - healthStarted < 500, `healthz took ${performance.now() - healthStarted} ms`);
    const reviewed = await answer;
    const took = performance.now() - started;
    assert.equal(reviewed.status, 200, reviewed.text);
    // At most a second a statement.
    assert.ok(took < 6000, `the review took ${took} ms`);
    const sqlFindings = reviewed.body.findings.filter((f: any) => f.rule === 'sql-syntax');
    assert.deepEqual(
      sqlFindings.map((f: any) => [f.component, f.severity]),
      slow.map((_, i) => [`Slow ${i}`, 'WARNING']),
    );
    for (const found of sqlFindings)
      assert.match(found.message, /not checked as postgresql SQL: it did not parse within 1000 ms/);
    // The worker that was ended is replaced: SQL that parses, and SQL that does not, are found as before.
    const after = await review({
      environmentName: 'prod',
      files: {
        'ok.orch.yaml': orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Count"]
    Count:
      type: "sql-executor"
      parameters:
        sqlScript: "select count(* from t"
`),
      },
    });
    assert.deepEqual(
      after.body.findings.filter((f: any) => f.rule === 'sql-syntax').map((f: any) => [f.component, f.severity]),
      [['Count', 'ERROR']],
    );
  });

  test('transitions leading back to a component already run are an invalid-graph error, and refuse the run', async () => {
    const loop = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["First"]
    First:
      type: "sql-executor"
      parameters:
        sqlScript: "select 1"
      transitions:
        success: ["Second"]
    Second:
      type: "sql-executor"
      parameters:
        sqlScript: "select 2"
      transitions:
        success: ["First"]
        failure: ["Again"]
    Again:
      type: "print-variables"
      transitions:
        unconditional: ["Again"]
`);
    const reviewed = await review({ environmentName: 'prod', files: { 'loop.orch.yaml': loop } });
    assert.equal(reviewed.status, 200, reviewed.text);
    const cycles = reviewed.body.findings.filter((f: any) => f.rule === 'invalid-graph');
    assert.deepEqual(
      cycles.map((f: any) => [f.component, f.parameter, f.severity]),
      [
        ['Again', 'transitions', 'ERROR'],
        ['Second', 'transitions', 'ERROR'],
      ],
    );
    assert.match(cycles[1].message, /"First" → "Second" → "First"/);
    await uploadVersion(server, caller, projectId, 'prod', 'loops', { 'pipelines/loop.orch.yaml': loop });
    const refused = expectProblem(
      await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
        token: caller.token,
        body: { environmentName: 'prod', pipelineName: 'pipelines/loop', versionName: 'loops' },
      }),
      400,
    );
    assert.ok(
      refused.violations?.some((v) => v.includes('components.Second.parameters.transitions') && v.includes('(invalid-graph)')),
      JSON.stringify(refused.violations),
    );
  });

  test('a child pipeline of the other kind is an unknown-pipeline error, and refuses the run before anything runs', async () => {
    const runs = (type: string, parameter: string, child: string) =>
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Child"]
    Child:
      type: "${type}"
      parameters:
        ${parameter}: "${child}"
`);
    const mart = `type: "transformation"\nversion: "1.0"\npipeline:\n  components:\n    Read:\n      type: "table-input"\n      parameters:\n        tableName: "orders"\n`;
    const files = {
      'pipelines/o2t.orch.yaml': runs('run-orchestration', 'orchestrationJob', 'pipelines/mart.tran.yaml'),
      'pipelines/t2o.orch.yaml': runs('run-transformation', 'transformationJob', 'pipelines/o2t.orch.yaml'),
      'pipelines/mart.tran.yaml': mart,
    };
    const reviewed = await review({ environmentName: 'prod', files });
    const wrongKind = reviewed.body.findings.filter((f: any) => f.rule === 'unknown-pipeline');
    assert.deepEqual(
      wrongKind.map((f: any) => [f.file, f.parameter, f.message]),
      [
        [
          'pipelines/o2t.orch.yaml',
          'orchestrationJob',
          '"pipelines/mart.tran.yaml" is not an orchestration pipeline of this version (its file is of the other kind)',
        ],
        [
          'pipelines/t2o.orch.yaml',
          'transformationJob',
          '"pipelines/o2t.orch.yaml" is not a transformation pipeline of this version (its file is of the other kind)',
        ],
      ],
    );
    await uploadVersion(server, caller, projectId, 'prod', 'kinds', files);
    const refused = expectProblem(
      await server.api('POST', `/projects/${projectId}/pipeline-executions`, {
        token: caller.token,
        body: { environmentName: 'prod', pipelineName: 'pipelines/o2t', versionName: 'kinds' },
      }),
      400,
    );
    assert.ok(
      refused.violations?.some((v) => v.includes('components.Child.parameters.orchestrationJob')),
      JSON.stringify(refused.violations),
    );
  });

  test('SQL is read as SQL for credentials: predicates are none, connection strings, JWTs and AWS keys are', async () => {
    const cases: [string, boolean][] = [
      ["SELECT key, value FROM settings WHERE key = 'region'", false],
      ["INSERT INTO audit(kind) VALUES ('auth=failed')", false],
      ["SELECT * FROM events WHERE token = 'abc-123-def-456'", false],
      ['SELECT * FROM t WHERE api_key IS NOT NULL AND password_changed_at > now()', false],
      ["ATTACH 'host=db.internal user=etl password=S3cr3t!' AS src (TYPE postgres)", true],
      ["SELECT * FROM dblink('dbname=x password=hunter2', 'select 1')", true],
      ["SELECT 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U' AS t", true],
      ["SELECT 'AKIAIOSFODNN7EXAMPLE' AS id", true],
      ["COPY t FROM 's3://bucket/x' CREDENTIALS 'aws_access_key_id=AKIAIOSFODNN7EXAMPLE'", true],
      ["SELECT * FROM read_csv('https://etl:pa55word@files.example.com/x.csv')", true],
    ];
    const components = cases
      .map(
        ([sql], i) => `    Q${i}:
      type: "sql-executor"
      parameters:
        sqlScript: ${JSON.stringify(sql)}
`,
      )
      .join('');
    const file = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: [${cases.map((_, i) => `"Q${i}"`).join(', ')}]
${components}`);
    const reviewed = await review({ environmentName: 'prod', files: { 'creds.orch.yaml': file } });
    assert.equal(reviewed.status, 200, reviewed.text);
    const flagged = new Set(
      reviewed.body.findings.filter((f: any) => f.rule === 'credential-in-parameter').map((f: any) => f.component),
    );
    for (const [i, [sql, credential]] of cases.entries()) assert.equal(flagged.has(`Q${i}`), credential, sql);
    assert.ok(!reviewed.text.includes('S3cr3t') && !reviewed.text.includes('hunter2') && !reviewed.text.includes('pa55word'));
  });

  test('an orchestration component of a type the reference agent does not run is a warning', async () => {
    const file = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Typo"]
    Typo:
      type: "sql-exector"
      parameters:
        sqlScript: "select 1"
`);
    const reviewed = await review({ environmentName: 'prod', files: { 'typo.orch.yaml': file } });
    assert.deepEqual(
      reviewed.body.findings.filter((f: any) => f.rule === 'unknown-component-type').map((f: any) => [f.component, f.severity]),
      [['Typo', 'WARNING']],
    );
    // The rest of the suite's files name only types the agent runs: none of theirs is a finding.
    const flawed = await review({ environmentName: 'prod', files: { 'flawed.orch.yaml': FLAWED } });
    assert.ok(!flawed.body.findings.some((f: any) => f.rule === 'unknown-component-type'));
  });

  test('SQL that is no statement at all (SELEC) is an error, as is any query of a transformation that does not parse', async () => {
    const script = (sql: string) =>
      orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Run"]
    Run:
      type: "sql-executor"
      parameters:
        sqlScript: ${JSON.stringify(sql)}
`);
    const query = `type: "transformation"\nversion: "1.0"\npipeline:\n  components:\n    Query:\n      type: "sql"\n      parameters:\n        query: "SELEC * FORM raw_orders"\n`;
    const reviewed = await review({
      environmentName: 'prod',
      files: {
        'typo.orch.yaml': script('SELEC 1 FROM t'),
        'comment.orch.yaml': script('-- load\n/* the orders */ DELET FROM t'),
        'odd.orch.yaml': script('CREATE OR REPLACE SECURE VIEW v COPY GRANTS AS SELECT 1'),
        'query.tran.yaml': query,
      },
    });
    assert.deepEqual(
      reviewed.body.findings
        .filter((f: any) => f.rule === 'sql-syntax')
        .map((f: any) => [f.file, f.severity])
        .sort(),
      [
        ['comment.orch.yaml', 'ERROR'],
        ['odd.orch.yaml', 'WARNING'],
        ['query.tran.yaml', 'ERROR'],
        ['typo.orch.yaml', 'ERROR'],
      ],
    );
  });

  test('a review lists its first 1,000 findings and counts the rest; a file that multiplies them through an alias is no 500', async () => {
    // 1,500 unknown names in one script, used by 40 components through a YAML alias: 60,000 findings.
    const script = Array.from({ length: 1500 }, (_, i) => `\${v${i}}`).join(' ');
    const components = Array.from(
      { length: 40 },
      (_, i) => `    Step ${i}:
      type: "sql-executor"
      parameters: ${i === 0 ? `&q\n        sqlScript: "select 1 -- ${script}"` : '*q'}
`,
    ).join('');
    const file = orchestration(`    Start:
      type: "start"
      transitions:
        unconditional: ["Step 0"]
${components}`);
    const reviewed = await review({ environmentName: 'prod', files: { 'many.orch.yaml': file } });
    assert.equal(reviewed.status, 200, reviewed.text.slice(0, 500));
    const total = reviewed.body.errors + reviewed.body.warnings;
    assert.ok(total >= 60_000, `${total} findings`);
    assert.equal(reviewed.body.findings.length, 1000);
    assert.equal(reviewed.body.findingsLeftOut, total - 1000);
    assert.ok(reviewed.text.length < 1_000_000, `${reviewed.text.length} bytes`);
  });

  test('refusals: unknown environment or version 404, both a version and files 400, another account 404, no token 401', async () => {
    expectProblem(await review({ environmentName: 'nope' }), 404);
    expectProblem(await review({ environmentName: 'prod', versionName: 'v9' }), 404);
    const both = expectProblem(await review({ environmentName: 'prod', versionName: 'v1', files: {} }), 400);
    assert.deepEqual(both.violations, ['body.files: must not be given with versionName']);
    expectProblem(await review({}), 400);
    const other = await server.newAccount('other');
    expectProblem(await review({ environmentName: 'prod' }, other.token), 404);
    expectProblem(await server.api('POST', `/projects/${projectId}/reviews`, { body: { environmentName: 'prod' } }), 401);
    // A review is a read: it leaves no audit event.
    const events = await server.api('GET', `/events?projectId=${projectId}`, { token: caller.token });
    assert.ok(!events.body.results.some((e: any) => e.route.endsWith('/reviews')));
  });
});
