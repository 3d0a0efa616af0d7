/**
 * The rules of a pipeline quality review: pure functions from a version's pipeline files to findings.
 * Each finding names its rule, severity and location (file, component, parameter); none quotes a
 * credential it found.
 */
import { checkSql } from './sql-checks.ts';
import { credentialInSql, credentialViolations } from '../../core/credentials.ts';
import {
  checkPipelines,
  describeViolation,
  parsedFile,
  pipelinesRunBy,
  type ParsedFiles,
  type PipelineViolation,
} from '../../contract/pipeline-checks.ts';
import { ORCHESTRATION_TYPES, PIPELINE_SUFFIXES, PipelineFileError, type Pipeline } from '../../contract/pipeline-file.ts';
import { OUTPUT_TYPES } from '../../contract/transformation.ts';
import { rowsOf } from '../../contract/variables.ts';

export const SEVERITIES = ['ERROR', 'WARNING'] as const;
export type Severity = (typeof SEVERITIES)[number];

/** Every rule, with what it finds: the documentation (docs/api/reviews.md) lists the same. */
export const RULES = {
  'invalid-file': ['ERROR', 'the file is not a pipeline file that can be read'],
  'invalid-graph': [
    'ERROR',
    'a transition, source or attached component names a component that is not there, or components form a cycle',
  ],
  'missing-parameter': ['ERROR', 'a parameter the component cannot run without is missing'],
  'unknown-pipeline': ['ERROR', 'a child pipeline (run-orchestration, run-transformation) is not in the version'],
  'pipeline-cycle': ['ERROR', 'pipelines run each other in a cycle'],
  'unknown-variable': ['ERROR', '${name} refers to a variable that neither the pipeline nor the project declares'],
  'undeclared-variable': ['ERROR', 'a component sets a variable that the pipeline does not declare'],
  'sql-syntax': ['ERROR', 'SQL that does not parse for the warehouse (WARNING for statements the parser may not know)'],
  'credential-in-parameter': [
    'ERROR',
    'a parameter holds a credential: it belongs in a secret, read through a variable or a connection',
  ],
  'unreachable-component': ['WARNING', 'an orchestration component that no path from the start reaches'],
  'unknown-component-type': [
    'WARNING',
    'an orchestration component of a type the reference agent does not run (a typo, or a component only another agent runs)',
  ],
  'unused-component': ['WARNING', 'a transformation component whose rows reach no output'],
} as const satisfies Record<string, readonly [Severity, string]>;
export type RuleId = keyof typeof RULES;

export interface Finding {
  rule: RuleId;
  severity: Severity;
  file: string;
  component?: string;
  parameter?: string;
  message: string;
}

export interface ReviewContext {
  /** Names of the project's variables (with the environment's overrides). */
  projectVariables: ReadonlySet<string>;
  /** The grammar SQL is parsed with (node-sql-parser's `database`). */
  sqlDialect: string;
}

function finding(
  rule: RuleId,
  file: string,
  message: string,
  at: { component?: string; parameter?: string } = {},
  severity?: Severity,
): Finding {
  return { rule, severity: severity ?? RULES[rule][0], file, ...at, message };
}

/** A violation of the run-start checks as a finding: its rule from what it says. */
function fromViolation(violation: PipelineViolation): Finding {
  const at = { component: violation.component, parameter: violation.parameter };
  const rule: RuleId =
    violation.parameter !== undefined && violation.message.startsWith('required')
      ? 'missing-parameter'
      : / pipeline of this version/.test(violation.message)
        ? 'unknown-pipeline'
        : violation.message.includes('run each other in a cycle')
          ? 'pipeline-cycle'
          : 'invalid-graph';
  return finding(rule, violation.file, violation.message, at);
}

// ---- Variables

const REFERENCE = /\$\{([^}]{1,255})\}/g;

/** Every string in a parameter value, with the path below the parameter. */
function* stringsIn(value: unknown, path = ''): Generator<[string, string]> {
  if (typeof value === 'string') yield [path, value];
  else if (Array.isArray(value)) for (const [i, item] of value.entries()) yield* stringsIn(item, `${path}[${i}]`);
  else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) yield* stringsIn(item, `${path}.${key}`);
  }
}

/** Names a component sets: query-to-scalar's mapping, iterators' variables, a child's variables are the child's. */
function variablesSet(type: string, parameters: Record<string, unknown>): [string, string][] {
  switch (type) {
    case 'query-to-scalar':
      return rowsOf(parameters.scalarVariableMapping).map((row) => ['scalarVariableMapping', String(row[0])]);
    case 'fixed-iterator':
      return rowsOf(parameters.variablesToIterate).map((row) => [
        'variablesToIterate',
        String(Array.isArray(row) ? row[0] : row),
      ]);
    case 'table-iterator':
      return rowsOf(parameters.columnMapping).map((row) => ['columnMapping', String(row[1] ?? row[0])]);
    case 'grid-iterator':
      return rowsOf(parameters.gridIteratorVariableMapping).map((row) => [
        'gridIteratorVariableMapping',
        String(row[1] ?? row[0]),
      ]);
    default:
      return [];
  }
}

function variableFindings(file: string, pipeline: Pipeline, context: ReviewContext): Finding[] {
  const declared = (name: string) => Object.hasOwn(pipeline.variables, name) || context.projectVariables.has(name);
  const findings: Finding[] = [];
  for (const component of pipeline.components.values()) {
    for (const [parameter, value] of Object.entries(component.parameters)) {
      const reported = new Set<string>();
      for (const [, text] of stringsIn(value)) {
        for (const [, name] of text.matchAll(REFERENCE)) {
          if (declared(name) || reported.has(name)) continue;
          reported.add(name);
          findings.push(
            finding('unknown-variable', file, `\${${name}} is not a variable of the pipeline or the project`, {
              component: component.name,
              parameter,
            }),
          );
        }
      }
    }
    for (const [parameter, name] of variablesSet(component.type, component.parameters)) {
      if (name !== '' && name !== 'undefined' && !Object.hasOwn(pipeline.variables, name)) {
        findings.push(
          finding('undeclared-variable', file, `sets variable "${name}", which the pipeline does not declare`, {
            component: component.name,
            parameter,
          }),
        );
      }
    }
  }
  return findings;
}

// ---- SQL

/** Statements the parser's grammars know well: a failure to parse one of these is an error. */
const WELL_KNOWN = /^\s*(\(\s*)*(select|with|insert|update|delete)\b/i;

/**
 * The first words of SQL statements of the warehouses (PostgreSQL, DuckDB, Snowflake, BigQuery, MySQL, T-SQL …):
 * a statement beginning with any other word (`SELEC`, `DELET`) is no statement at all, and is an error like a
 * broken SELECT. Comments before it are passed over.
 */
const STATEMENT_WORDS = new Set(
  (
    'abort alter analyze attach begin call checkpoint close cluster comment commit copy create deallocate declare delete ' +
    'describe desc detach discard do drop end execute exec explain export fetch from get grant import insert install list ' +
    'load lock merge move notify pivot pragma prepare put reindex release remove replace reset revoke rollback savepoint ' +
    'select set show start summarize table truncate unload unlisten unpivot update upsert use vacuum values with if go ' +
    'print raise return while undrop'
  ).split(' '),
);

/** The first word of `sql` past comments and opening brackets, lower case ('' when there is none). */
function firstWord(sql: string): string {
  const text = sql.replace(/^(\s|--[^\n]*(\n|$)|\/\*[\s\S]*?\*\/|\()*/, '');
  return /^[A-Za-z_]+/.exec(text)?.[0].toLowerCase() ?? '';
}

/** How bad SQL that does not parse is: an error for a query (a transformation's `sql`), a well-known statement, or no statement at all. */
function severityOfUnparsed(componentType: string, sqlText: string): Severity {
  if (componentType === 'sql' || WELL_KNOWN.test(sqlText)) return 'ERROR';
  const word = firstWord(sqlText);
  return word !== '' && !STATEMENT_WORDS.has(word) ? 'ERROR' : 'WARNING';
}

/** Where a component keeps SQL. */
const SQL_PARAMETERS: Record<string, string[]> = {
  'sql-executor': ['sqlScript'],
  'query-to-scalar': ['query'],
  sql: ['query', 'sqlQuery'],
};

/** `${name}` replaced so that the statement still reads as SQL: a simple default value, else a neutral name. */
function withPlaceholders(sqlText: string, pipeline: Pipeline): string {
  return sqlText.replace(REFERENCE, (_whole, name: string) => {
    const value = Object.hasOwn(pipeline.variables, name) ? pipeline.variables[name].defaultValue : undefined;
    return (typeof value === 'string' || typeof value === 'number') && /^[\w.]{1,64}$/.test(String(value))
      ? String(value)
      : 'dpc_variable';
  });
}

/** The SQL of the file's components, as the review parses it: where it is, and its text with placeholders. */
function sqlOf(pipeline: Pipeline): { component: string; type: string; parameter: string; sqlText: string }[] {
  const found: { component: string; type: string; parameter: string; sqlText: string }[] = [];
  for (const component of pipeline.components.values()) {
    for (const parameter of SQL_PARAMETERS[component.type] ?? []) {
      const text = component.parameters[parameter];
      if (typeof text !== 'string' || text.trim() === '') continue;
      found.push({ component: component.name, type: component.type, parameter, sqlText: withPlaceholders(text, pipeline) });
    }
  }
  return found;
}

/** The SQL that does not parse in the context's grammar (parsed off the request thread, within a time: sql-checks.ts). */
async function sqlFindings(file: string, pipeline: Pipeline, context: ReviewContext): Promise<Finding[]> {
  const statements = sqlOf(pipeline);
  if (statements.length === 0) return [];
  const verdicts = await checkSql(
    context.sqlDialect,
    statements.map((statement) => statement.sqlText),
  );
  const findings: Finding[] = [];
  statements.forEach(({ component, type, parameter, sqlText }, i) => {
    const verdict = verdicts[i];
    if (verdict.parses === true) return;
    const at = { component, parameter };
    if (verdict.parses === undefined) {
      findings.push(
        finding(
          'sql-syntax',
          file,
          `was ${verdict.why.replace(/^not checked/, 'not checked as ' + context.sqlDialect + ' SQL')}`,
          at,
          'WARNING',
        ),
      );
      return;
    }
    const { line, message } = verdict;
    findings.push(
      finding(
        'sql-syntax',
        file,
        `does not parse as ${context.sqlDialect} SQL${line ? ` (line ${line})` : ''}: ${message}`,
        at,
        severityOfUnparsed(type, sqlText),
      ),
    );
  });
  return findings;
}

// ---- Credentials

function credentialFindings(file: string, pipeline: Pipeline): Finding[] {
  const findings: Finding[] = [];
  for (const component of pipeline.components.values()) {
    const sqlParameters = SQL_PARAMETERS[component.type] ?? [];
    for (const [parameter, value] of Object.entries(component.parameters)) {
      // SQL is read as SQL: its predicates (`WHERE key = 'region'`) are no credentials written down.
      if (sqlParameters.includes(parameter) && typeof value === 'string') {
        const why = credentialInSql(value);
        if (why)
          findings.push(
            finding('credential-in-parameter', file, `holds a credential (${why}); keep it in a secret and refer to it`, {
              component: component.name,
              parameter,
            }),
          );
        continue;
      }
      const violations = credentialViolations({ [parameter]: value }, 'parameters', 'keep it in a secret and refer to it');
      if (violations.length > 0) {
        // The detector's phrase says why without quoting the value.
        const why = violations[0].replace(/^[^:]*: /, '');
        findings.push(finding('credential-in-parameter', file, why, { component: component.name, parameter }));
      }
    }
  }
  return findings;
}

// ---- Reachability

function reachabilityFindings(file: string, pipeline: Pipeline): Finding[] {
  const components = [...pipeline.components.values()];
  if (pipeline.kind === 'orchestration') {
    const targets = new Set(
      components.flatMap((c) => [...Object.values(c.transitions).flat(), ...(c.iterationTarget ? [c.iterationTarget] : [])]),
    );
    const starts = components.filter((c) => c.type === 'start');
    const roots = starts.length > 0 ? starts : components.filter((c) => !targets.has(c.name));
    const reached = new Set<string>();
    const queue = roots.map((c) => c.name);
    while (queue.length > 0) {
      const name = queue.pop()!;
      if (reached.has(name)) continue;
      reached.add(name);
      const component = pipeline.components.get(name);
      if (!component) continue;
      queue.push(
        ...Object.values(component.transitions).flat(),
        ...(component.iterationTarget ? [component.iterationTarget] : []),
      );
    }
    return [
      ...components
        .filter((c) => !reached.has(c.name))
        .map((c) =>
          finding('unreachable-component', file, 'no path from the start reaches it: it never runs', { component: c.name }),
        ),
      ...transitionCycles(file, pipeline),
      ...components
        .filter((c) => !KNOWN_ORCHESTRATION_TYPES.has(c.type))
        .map((c) =>
          finding(
            'unknown-component-type',
            file,
            `"${c.type}" is not a component type the reference agent runs: the run would fail at this step`,
            {
              component: c.name,
            },
          ),
        ),
    ];
  }
  // Transformation: rows flow from sources to outputs; a component upstream of no output does no work.
  const outputs = components.filter((c) => (OUTPUT_TYPES as readonly string[]).includes(c.type));
  const feeding = new Set<string>();
  const queue = outputs.map((c) => c.name);
  while (queue.length > 0) {
    const name = queue.pop()!;
    if (feeding.has(name)) continue;
    feeding.add(name);
    queue.push(...(pipeline.components.get(name)?.sources ?? []));
  }
  return components
    .filter((c) => !feeding.has(c.name))
    .map((c) => finding('unused-component', file, 'its rows reach no output component', { component: c.name }));
}

const KNOWN_ORCHESTRATION_TYPES: ReadonlySet<string> = new Set(ORCHESTRATION_TYPES);

/**
 * Transitions that lead back to a component already on their path: a run goes through each component once (the
 * agent does not run one again), so such a loop would silently not loop. One finding per cycle, on the component
 * whose transition closes it. A walk with its own stack: a file may hold thousands of components.
 */
function transitionCycles(file: string, pipeline: Pipeline): Finding[] {
  const findings: Finding[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const next = (name: string) => {
    const component = pipeline.components.get(name);
    return component ? [...new Set(Object.values(component.transitions).flat())] : [];
  };
  for (const root of pipeline.components.keys()) {
    if (state.has(root)) continue;
    const stack: { name: string; targets: string[]; at: number }[] = [{ name: root, targets: next(root), at: 0 }];
    state.set(root, 'open');
    while (stack.length > 0) {
      const top = stack.at(-1)!;
      if (top.at === top.targets.length) {
        state.set(top.name, 'done');
        stack.pop();
        continue;
      }
      const target = top.targets[top.at++];
      if (!pipeline.components.has(target) || state.get(target) === 'done') continue;
      if (state.get(target) === 'open') {
        const from = stack.findIndex((frame) => frame.name === target);
        const path = [...stack.slice(from).map((frame) => frame.name), target];
        const shown = path.length <= 8 ? path : [...path.slice(0, 3), `… ${path.length - 5} more …`, ...path.slice(-2)];
        findings.push(
          finding(
            'invalid-graph',
            file,
            `its transitions lead back to a component already run: ${shown.map((name) => `"${name}"`).join(' → ')}; a run goes through each component once, so it would not loop`,
            { component: top.name, parameter: 'transitions' },
          ),
        );
        continue;
      }
      state.set(target, 'open');
      stack.push({ name: target, targets: next(target), at: 0 });
    }
  }
  return findings;
}

// ---- A version

const isPipelineFile = (path: string) =>
  path.endsWith(PIPELINE_SUFFIXES.orchestration) || path.endsWith(PIPELINE_SUFFIXES.transformation);

/**
 * The findings of every pipeline file among `files` (by path), most severe first, then by file and component.
 * Each file is parsed once, into `parsed` (a caller that has parsed them already hands its map).
 */
export async function reviewFiles(
  files: Record<string, string>,
  context: ReviewContext,
  parsed: ParsedFiles = new Map(),
): Promise<Finding[]> {
  const findings: Finding[] = [];
  const paths = Object.keys(files).filter(isPipelineFile).sort();
  for (const path of paths) {
    const pipeline = parsedFile(path, files, parsed);
    if (pipeline instanceof PipelineFileError) {
      const error = pipeline;
      findings.push(
        error.component === undefined
          ? finding('invalid-file', path, error.message)
          : finding('invalid-graph', path, error.message, { component: error.component, parameter: error.parameter }),
      );
      continue;
    }
    // Appended one by one: a file may have very many (a spread of them all would run out of stack).
    for (const found of [
      reachabilityFindings(path, pipeline),
      variableFindings(path, pipeline, context),
      await sqlFindings(path, pipeline, context),
      credentialFindings(path, pipeline),
    ]) {
      for (const one of found) findings.push(one);
    }
  }
  // Parameters and child pipelines, as a run start checks them, in one walk over every file (each checked
  // once). A child that cannot be read at all is that child's own finding (invalid-file or invalid-graph).
  for (const violation of checkPipelines(paths, files, parsed)) findings.push(fromViolation(violation));
  const rank = (f: Finding) => SEVERITIES.indexOf(f.severity);
  return findings.sort(
    (a, b) =>
      rank(a) - rank(b) ||
      a.file.localeCompare(b.file) ||
      (a.component ?? '').localeCompare(b.component ?? '') ||
      a.rule.localeCompare(b.rule),
  );
}

/**
 * What blocks a run of `file`: the review's errors in it and the pipelines it runs (warnings do not block).
 * A run start calls it after its own checks, so what they refuse is refused as before.
 */
export async function errorsBeforeRun(
  file: string,
  files: Record<string, string>,
  context: ReviewContext,
  parsed: ParsedFiles = new Map(),
): Promise<Finding[]> {
  const run = Object.create(null) as Record<string, string>;
  for (const path of pipelinesRunBy(file, files, parsed)) run[path] = files[path];
  return (await reviewFiles(run, context, parsed)).filter((finding) => finding.severity === 'ERROR');
}

/** A finding as a violation of a refused run: `<file>: components.<c>.parameters.<p>: <message> (<rule>)`. */
export function describeFinding(finding: Finding): string {
  return `${describeViolation(finding)} (${finding.rule})`;
}
