/**
 * Compiles a transformation pipeline (`.tran.yaml`) into SQL that runs inside the warehouse: for each
 * output component, the statements that write it, each input and operator a CTE of one `WITH`. Nothing
 * is pulled through the agent. Identifiers and literals are quoted by the warehouse's dialect. Pure: the
 * server can check a file and `dpc pipeline sql` can print the SQL without a warehouse.
 *
 * Columns are tracked where the file makes them known (table-input's `columnNames`, mappings, groupings);
 * an operator that needs a column list after a `sql` component without one says so.
 */
import { ENVIRONMENT_DEFAULT } from './work.ts';
import { PipelineFileError, type Component, type Pipeline, type VariableValues } from './pipeline-file.ts';
import { qualifiedName, type SqlDialect, type TableName } from './sql-dialect.ts';
import { listOf, rowsOf, substitute, yes } from './variables.ts';

export interface CompileContext {
  dialect: SqlDialect;
  variables: VariableValues;
  /** What `[Environment Default]` means. */
  defaultDatabase?: string;
  defaultSchema?: string;
}

export interface CompiledOutput {
  /** The output component. */
  component: string;
  type: string;
  /** Run in order (a truncate, then the insert). */
  statements: string[];
  /** The table written and, for each of its columns the file makes known, the input table columns it is made from. */
  columnLineage?: { target: TableName; columns: Record<string, ColumnOrigin[]> };
}

/** An input table's column that a column is made from. */
export interface ColumnOrigin {
  table: TableName;
  field: string;
}

/**
 * A compiled node: the SELECT that gives its rows, its columns when known, and when known for each column
 * the input table columns it is made from (none for a constant; null where a `sql` query hides them).
 */
interface Node {
  select: string;
  columns: string[] | null;
  origins: Map<string, ColumnOrigin[]> | null;
}

/** The origins of `columns` as `source` gives them (renamed by `as`), or null when any is not known. */
function originsOf(source: Node, columns: readonly string[], as: (column: string) => string = (c) => c) {
  if (source.origins === null) return null;
  const origins = new Map<string, ColumnOrigin[]>();
  for (const column of columns) {
    const from = source.origins.get(column);
    if (from === undefined) return null;
    origins.set(as(column), from);
  }
  return origins;
}

/** Every origin of the columns of `source` that `expression` names (quoted, or bare outside string literals). */
function originsIn(source: Node, expression: string): ColumnOrigin[] | null {
  if (source.origins === null || source.columns === null) return null;
  const code = expression.replace(/'(?:[^']|'')*'/g, "''");
  const named = source.columns.filter((column) => {
    const quoted = `"${column.replace(/"/g, '""')}"`;
    // A bare name is a word of its own (a column's name that is no plain word is only ever written quoted).
    return code.includes(quoted) || (/^\w+$/.test(column) && new RegExp(`(^|[^\\w"])${column}(?![\\w"])`, 'i').test(code));
  });
  return unique(named.flatMap((column) => source.origins!.get(column) ?? []));
}

function unique(origins: ColumnOrigin[]): ColumnOrigin[] {
  const seen = new Map<string, ColumnOrigin>();
  for (const origin of origins) seen.set(JSON.stringify([origin.table, origin.field]), origin);
  return [...seen.values()];
}

export const OUTPUT_TYPES = ['table-output', 'rewrite-table', 'table-update'] as const;
export const TRANSFORMATION_TYPES = [
  'table-input',
  'filter',
  'calculator',
  'join',
  'aggregate',
  'distinct',
  'rank',
  'window-calculation',
  'unite',
  'sql',
  'rename',
  'convert-type',
  ...OUTPUT_TYPES,
];

/** The parameters each type cannot do without (checked when a run starts). */
export const REQUIRED_TRANSFORMATION_PARAMETERS: Record<string, string[]> = {
  'table-input': ['targetTable'],
  filter: ['filterConditions'],
  calculator: ['calculations'],
  join: ['mainTable', 'joins', 'joinExpressions'],
  aggregate: ['aggregations'],
  rank: ['functions'],
  sql: ['query'],
  rename: ['columnMapping'],
  'convert-type': ['conversions'],
  'table-output': ['targetTable'],
  'rewrite-table': ['targetTable'],
  'table-update': ['targetTable', 'joinExpression'],
};

class Compiler {
  private readonly nodes = new Map<string, Node>();
  private readonly q: (name: string) => string;

  constructor(
    private readonly pipeline: Pipeline,
    private readonly ctx: CompileContext,
  ) {
    this.q = (name) => ctx.dialect.quoteIdentifier(name);
  }

  private fail(component: Component, parameter: string | undefined, message: string): never {
    throw new PipelineFileError(`${component.type} "${component.name}": ${message}`, component.name, parameter);
  }

  private text(component: Component, parameter: string, required = true): string {
    const raw = component.parameters[parameter];
    if (raw === undefined || raw === null || raw === '') {
      if (required) this.fail(component, parameter, `parameter "${parameter}" is required.`);
      return '';
    }
    try {
      return substitute(raw, this.ctx.variables);
    } catch (error) {
      this.fail(component, parameter, (error as Error).message);
    }
  }

  private rows(component: Component, parameter: string, required = true): string[][] {
    const rows = rowsOf(component.parameters[parameter]).map((row) =>
      row.map((cell) => {
        try {
          return substitute(cell, this.ctx.variables);
        } catch (error) {
          this.fail(component, parameter, (error as Error).message);
        }
      }),
    );
    if (required && rows.length === 0) this.fail(component, parameter, `parameter "${parameter}" needs at least one row.`);
    return rows;
  }

  private list(component: Component, parameter: string): string[] {
    return listOf(component.parameters[parameter]).map((item) => substitute(item, this.ctx.variables));
  }

  /** database/schema/table parameters, `[Environment Default]` resolved. */
  table(component: Component, tableParameter = 'targetTable'): TableName {
    const part = (parameter: string, fallback: string | undefined) => {
      const value = this.text(component, parameter, false);
      return value === '' || value === ENVIRONMENT_DEFAULT ? fallback : value;
    };
    return {
      database: part('database', this.ctx.defaultDatabase),
      schema: part('schema', this.ctx.defaultSchema),
      table: this.text(component, tableParameter),
    };
  }

  private single(component: Component): string {
    if (component.sources.length !== 1)
      this.fail(component, 'sources', `needs exactly one source; it has ${component.sources.length}.`);
    return component.sources[0];
  }

  private columnsOf(component: Component, source: string): string[] {
    const columns = this.node(source).columns;
    if (columns === null) {
      this.fail(
        component,
        'sources',
        `needs the columns of "${source}", which are not known (give the sql component "columnNames").`,
      );
    }
    return columns;
  }

  private comparison(column: string, qualifier: string, comparator: string, value: string): string {
    const literal = this.ctx.dialect.quoteLiteral(value);
    const c = this.q(column);
    const table: Record<string, string> = {
      'equal to': `${c} = ${literal}`,
      'not equal to': `${c} <> ${literal}`,
      'greater than': `${c} > ${literal}`,
      'less than': `${c} < ${literal}`,
      'greater than or equal to': `${c} >= ${literal}`,
      'less than or equal to': `${c} <= ${literal}`,
      like: `${c} LIKE ${literal}`,
      ilike: `${c} ILIKE ${literal}`,
      null: `${c} IS NULL`,
      blank: `(${c} IS NULL OR CAST(${c} AS VARCHAR) = '')`,
    };
    const condition = table[comparator.trim().toLowerCase()];
    if (condition === undefined) throw new Error(`comparator "${comparator}" is not one of ${Object.keys(table).join(', ')}.`);
    return qualifier.trim().toLowerCase() === 'not' ? `NOT (${condition})` : condition;
  }

  /** The node of component `name`, compiled once. */
  node(name: string): Node {
    const known = this.nodes.get(name);
    if (known) return known;
    const component = this.pipeline.components.get(name)!;
    const node = this.compile(component);
    this.nodes.set(name, node);
    return node;
  }

  private compile(component: Component): Node {
    const q = this.q;
    switch (component.type) {
      case 'table-input': {
        const columns = this.list(component, 'columnNames');
        const where = this.text(component, 'whereClause', false);
        const table = this.table(component);
        return {
          select: `SELECT ${columns.length > 0 ? columns.map(q).join(', ') : '*'} FROM ${qualifiedName(this.ctx.dialect, table)}${where ? ` WHERE ${where}` : ''}`,
          columns: columns.length > 0 ? columns : null,
          origins: columns.length > 0 ? new Map(columns.map((field) => [field, [{ table, field }]])) : null,
        };
      }
      case 'sql': {
        const columns = this.list(component, 'columnNames');
        return {
          select: `SELECT * FROM (${this.text(component, 'query')}) AS ${q('sql query')}`,
          columns: columns.length > 0 ? columns : null,
          // What a query reads is its own: no guess.
          origins: null,
        };
      }
      case 'filter': {
        const source = this.single(component);
        const rows = this.rows(component, 'filterConditions');
        const combine = String(component.parameters.combineCondition ?? 'And').toLowerCase() === 'or' ? ' OR ' : ' AND ';
        const conditions = rows.map(([column, qualifier, comparator, value]) => {
          try {
            return this.comparison(column, qualifier ?? 'Is', comparator ?? 'Equal to', value ?? '');
          } catch (error) {
            this.fail(component, 'filterConditions', (error as Error).message);
          }
        });
        return {
          select: `SELECT * FROM ${q(source)} WHERE ${conditions.map((c) => `(${c})`).join(combine)}`,
          columns: this.node(source).columns,
          origins: this.node(source).origins,
        };
      }
      case 'calculator': {
        const source = this.single(component);
        const calculations = this.rows(component, 'calculations');
        const outputs = calculations.map(([expression, output]) => {
          if (!output) this.fail(component, 'calculations', 'each calculation is [expression, output column].');
          return { expression, output };
        });
        const include = yes(component.parameters.includeInputColumns, true);
        const inputs = this.node(source).columns;
        const replaced = new Set(outputs.map((o) => o.output));
        const kept = include ? (inputs === null ? ['*'] : inputs.filter((c) => !replaced.has(c)).map(q)) : [];
        const columns = include
          ? inputs === null
            ? null
            : [...inputs.filter((c) => !replaced.has(c)), ...outputs.map((o) => o.output)]
          : outputs.map((o) => o.output);
        const sourceNode = this.node(source);
        let origins: Map<string, ColumnOrigin[]> | null =
          include && inputs !== null
            ? originsOf(
                sourceNode,
                inputs.filter((c) => !replaced.has(c)),
              )
            : new Map();
        for (const { expression, output } of outputs) {
          const from = origins && originsIn(sourceNode, expression);
          origins = from ? origins!.set(output, from) : null;
        }
        return {
          select: `SELECT ${[...kept, ...outputs.map((o) => `(${o.expression}) AS ${q(o.output)}`)].join(', ')} FROM ${q(source)}`,
          columns,
          origins: columns === null ? null : origins,
        };
      }
      case 'join': {
        const main = this.text(component, 'mainTable');
        if (!component.sources.includes(main)) this.fail(component, 'mainTable', `"${main}" is not one of its sources.`);
        const mainAlias = this.text(component, 'mainTableAlias', false) || main;
        const joins = this.rows(component, 'joins');
        const expressions = this.rows(component, 'joinExpressions');
        let from = `${q(main)} AS ${q(mainAlias)}`;
        const byAlias = new Map([[mainAlias, main]]);
        joins.forEach(([table, alias, type], index) => {
          byAlias.set(alias || table, table);
          if (!component.sources.includes(table)) this.fail(component, 'joins', `"${table}" is not one of its sources.`);
          const kind = { inner: 'INNER', left: 'LEFT', right: 'RIGHT', full: 'FULL' }[String(type ?? 'Inner').toLowerCase()];
          if (!kind) this.fail(component, 'joins', `join type "${type}" is not Inner, Left, Right or Full.`);
          const named = expressions.find((row) => row[1] !== undefined && row[1].split('_').includes(alias || table));
          const expression = (named ?? expressions[index])?.[0];
          if (!expression) this.fail(component, 'joinExpressions', `no join expression for "${alias || table}".`);
          from += ` ${kind} JOIN ${q(table)} AS ${q(alias || table)} ON ${expression}`;
        });
        const mappings = this.rows(component, 'columnMappings', false);
        if (mappings.length === 0) return { select: `SELECT * FROM ${from}`, columns: null, origins: null };
        const selected = mappings.map(([sourceColumn, output]) => {
          const dot = sourceColumn.indexOf('.');
          const reference = dot > 0 ? `${q(sourceColumn.slice(0, dot))}.${q(sourceColumn.slice(dot + 1))}` : q(sourceColumn);
          const name = output || sourceColumn.slice(dot + 1);
          // The column's origins as the source it names (by alias; unqualified: the one source that has it) gives them.
          const field = sourceColumn.slice(dot + 1);
          const owners =
            dot > 0
              ? [byAlias.get(sourceColumn.slice(0, dot))]
              : component.sources.filter((s) => this.node(s).columns?.includes(field));
          const origin = owners.length === 1 && owners[0] !== undefined ? this.node(owners[0]).origins?.get(field) : undefined;
          return { sql: `${reference} AS ${q(name)}`, name, origin };
        });
        const origins = selected.every((s) => s.origin !== undefined) ? new Map(selected.map((s) => [s.name, s.origin!])) : null;
        return {
          select: `SELECT ${selected.map((s) => s.sql).join(', ')} FROM ${from}`,
          columns: selected.map((s) => s.name),
          origins,
        };
      }
      case 'aggregate': {
        const source = this.single(component);
        const groupings = this.list(component, 'groupings');
        const functions: Record<string, (c: string) => string> = {
          sum: (c) => `SUM(${c})`,
          count: (c) => `COUNT(${c})`,
          'count distinct': (c) => `COUNT(DISTINCT ${c})`,
          average: (c) => `AVG(${c})`,
          max: (c) => `MAX(${c})`,
          min: (c) => `MIN(${c})`,
        };
        const aggregations = this.rows(component, 'aggregations').map(([column, type]) => {
          const make = functions[String(type ?? '').toLowerCase()];
          if (!make)
            this.fail(component, 'aggregations', `aggregation "${type}" is not one of ${Object.keys(functions).join(', ')}.`);
          const name = `${String(type).toLowerCase().replace(/\s+/g, '_')}_${column}`;
          return { sql: `${make(q(column))} AS ${q(name)}`, name, column };
        });
        const select = [...groupings.map(q), ...aggregations.map((a) => a.sql)].join(', ');
        const grouped = originsOf(this.node(source), groupings);
        const aggregated = originsOf(
          this.node(source),
          aggregations.map((a) => a.column),
        );
        return {
          select: `SELECT ${select} FROM ${q(source)}${groupings.length > 0 ? ` GROUP BY ${groupings.map(q).join(', ')}` : ''}`,
          columns: [...groupings, ...aggregations.map((a) => a.name)],
          origins:
            grouped && aggregated
              ? new Map([...grouped, ...aggregations.map((a): [string, ColumnOrigin[]] => [a.name, aggregated.get(a.column)!])])
              : null,
        };
      }
      case 'distinct': {
        const source = this.single(component);
        const columns = this.list(component, 'distinctColumns');
        if (columns.length === 0) return { ...this.node(source), select: `SELECT DISTINCT * FROM ${q(source)}` };
        return {
          select: `SELECT DISTINCT ${columns.map(q).join(', ')} FROM ${q(source)}`,
          columns,
          origins: originsOf(this.node(source), columns),
        };
      }
      case 'rank':
      case 'window-calculation': {
        const source = this.single(component);
        const partition = this.list(component, 'partitionData');
        const ordering = this.rows(component, 'orderingWithinPartitions', false).map(
          ([column, direction]) =>
            `${q(column)} ${
              String(direction ?? 'Ascending')
                .toLowerCase()
                .startsWith('desc')
                ? 'DESC'
                : 'ASC'
            }`,
        );
        const over = `OVER (${partition.length > 0 ? `PARTITION BY ${partition.map(q).join(', ')}` : ''}${ordering.length > 0 ? `${partition.length > 0 ? ' ' : ''}ORDER BY ${ordering.join(', ')}` : ''})`;
        const windowFunctions: Record<string, string> = {
          rank: 'RANK()',
          'dense rank': 'DENSE_RANK()',
          'row number': 'ROW_NUMBER()',
          'percent rank': 'PERCENT_RANK()',
          'cume dist': 'CUME_DIST()',
        };
        const outputs = this.rows(component, 'functions').map(([fn, output]) => {
          const sql = windowFunctions[String(fn).toLowerCase()];
          if (!sql)
            this.fail(
              component,
              'functions',
              `window function "${fn}" is not one of ${Object.keys(windowFunctions).join(', ')}.`,
            );
          if (!output) this.fail(component, 'functions', 'each function is [function, output column].');
          return { sql: `${sql} ${over} AS ${q(output)}`, name: output };
        });
        const include = yes(component.parameters.includeInputColumns, true);
        const inputs = include ? this.node(source).columns : [];
        // A window function's value is made from the columns it partitions and orders by.
        const ordered = this.rows(component, 'orderingWithinPartitions', false).map(([column]) => column);
        const windowed = originsOf(this.node(source), [...partition, ...ordered]);
        const kept = inputs === null ? null : originsOf(this.node(source), inputs);
        return {
          select: `SELECT ${[...(include ? (inputs === null ? ['*'] : inputs.map(q)) : []), ...outputs.map((o) => o.sql)].join(', ')} FROM ${q(source)}`,
          columns: inputs === null ? null : [...inputs, ...outputs.map((o) => o.name)],
          origins:
            kept && windowed
              ? new Map([
                  ...kept,
                  ...outputs.map((o): [string, ColumnOrigin[]] => [o.name, unique([...windowed.values()].flat())]),
                ])
              : null,
        };
      }
      case 'unite': {
        if (component.sources.length < 2) this.fail(component, 'sources', 'needs two or more sources.');
        const addSource = yes(component.parameters.addSourceColumn);
        const known = component.sources.every((source) => this.node(source).columns !== null);
        if (!known) {
          if (addSource) this.fail(component, 'addSourceColumn', 'needs the columns of every source.');
          return {
            select: component.sources.map((s) => `SELECT * FROM ${q(s)}`).join(' UNION ALL '),
            columns: null,
            origins: null,
          };
        }
        const all: string[] = [];
        for (const source of component.sources) for (const c of this.node(source).columns!) if (!all.includes(c)) all.push(c);
        const parts = component.sources.map((source) => {
          const has = new Set(this.node(source).columns!);
          const cells = all.map((c) => (has.has(c) ? q(c) : `NULL AS ${q(c)}`));
          if (addSource) cells.push(`${this.ctx.dialect.quoteLiteral(source)} AS ${q('source_component')}`);
          return `SELECT ${cells.join(', ')} FROM ${q(source)}`;
        });
        // A united column is made from that column of every source that has it.
        const sources = component.sources.map((source) => this.node(source));
        const origins = sources.every((node) => node.origins !== null)
          ? new Map(all.map((c) => [c, unique(sources.flatMap((node) => node.origins!.get(c) ?? []))]))
          : null;
        if (origins && addSource) origins.set('source_component', []);
        return { select: parts.join(' UNION ALL '), columns: addSource ? [...all, 'source_component'] : all, origins };
      }
      case 'rename': {
        const source = this.single(component);
        const mapping = new Map(this.rows(component, 'columnMapping').map(([from, to]) => [from, to || from]));
        if (!yes(component.parameters.includeInputColumns)) {
          return {
            select: `SELECT ${[...mapping].map(([from, to]) => `${q(from)} AS ${q(to)}`).join(', ')} FROM ${q(source)}`,
            columns: [...mapping.values()],
            origins: originsOf(this.node(source), [...mapping.keys()], (c) => mapping.get(c)!),
          };
        }
        const inputs = this.columnsOf(component, source);
        const columns = inputs.map((c) => mapping.get(c) ?? c);
        return {
          select: `SELECT ${inputs.map((c) => `${q(c)} AS ${q(mapping.get(c) ?? c)}`).join(', ')} FROM ${q(source)}`,
          columns,
          origins: originsOf(this.node(source), inputs, (c) => mapping.get(c) ?? c),
        };
      }
      case 'convert-type': {
        const source = this.single(component);
        const conversions = new Map<string, string>();
        for (const [column, type, size, precision] of this.rows(component, 'conversions')) {
          try {
            conversions.set(
              column,
              this.ctx.dialect.typeName(type, size ? Number(size) : undefined, precision ? Number(precision) : undefined),
            );
          } catch (error) {
            this.fail(component, 'conversions', (error as Error).message);
          }
        }
        const inputs = this.columnsOf(component, source);
        return {
          select: `SELECT ${inputs.map((c) => (conversions.has(c) ? `CAST(${q(c)} AS ${conversions.get(c)}) AS ${q(c)}` : q(c))).join(', ')} FROM ${q(source)}`,
          columns: inputs,
          origins: this.node(source).origins,
        };
      }
      default:
        this.fail(
          component,
          'type',
          `component type "${component.type}" is not supported in transformations (supported: ${TRANSFORMATION_TYPES.join(', ')}).`,
        );
    }
  }

  /** `WITH` every ancestor of `name` (dependencies first), then `tail`. */
  withChain(name: string): string {
    const order: string[] = [];
    const visit = (n: string) => {
      if (order.includes(n)) return;
      for (const source of this.pipeline.components.get(n)!.sources) visit(source);
      order.push(n);
    };
    visit(name);
    return `WITH ${order.map((n) => `${this.q(n)} AS (${this.node(n).select})`).join(', ')}`;
  }

  output(component: Component): CompiledOutput {
    const q = this.q;
    const source = this.single(component);
    const query = `${this.withChain(source)} SELECT * FROM ${q(source)}`;
    const targetTable = this.table(component);
    const target = qualifiedName(this.ctx.dialect, targetTable);
    const statements: string[] = [];
    const origins = this.node(source).origins;
    // The written columns: `written` pairs each input column with the target column it goes to.
    let written: [string, string][] | null = this.node(source).columns?.map((c) => [c, c]) ?? null;
    if (component.type === 'rewrite-table') {
      if (this.ctx.dialect.createOrReplace) statements.push(`CREATE OR REPLACE TABLE ${target} AS ${query}`);
      else statements.push(`DROP TABLE IF EXISTS ${target}`, `CREATE TABLE ${target} AS ${query}`);
    } else if (component.type === 'table-output') {
      const truncate = String(component.parameters.truncate ?? 'Append').toLowerCase() === 'truncate';
      if (truncate) statements.push(`DELETE FROM ${target}`);
      const mapping = this.rows(component, 'columnMapping', false);
      if (mapping.length === 0) statements.push(`INSERT INTO ${target} ${query}`);
      else {
        written = mapping.map(([input, output]) => [input, output || input]);
        const inputs = mapping.map(([input]) => q(input)).join(', ');
        const outputs = mapping.map(([input, output]) => q(output || input)).join(', ');
        statements.push(`INSERT INTO ${target} (${outputs}) ${this.withChain(source)} SELECT ${inputs} FROM ${q(source)}`);
      }
    } else {
      // table-update: a MERGE of the input into the target.
      const targetAlias = this.text(component, 'targetAlias', false) || 'target';
      const sourceAlias = this.text(component, 'sourceAlias', false) || 'input';
      const on = this.text(component, 'joinExpression');
      const update = this.rows(component, 'updateMapping', false);
      const insert = this.rows(component, 'insertMapping', false);
      const whenMatched = this.rows(component, 'whenMatched', false);
      written = [...update, ...insert].map(([input, output]) => [input, output || input]);
      const clauses: string[] = [];
      const setList = update.map(([input, output]) => `${q(output || input)} = ${q(sourceAlias)}.${q(input)}`).join(', ');
      if (whenMatched.length > 0) {
        for (const [condition, operation] of whenMatched) {
          const guard = condition && condition.trim() !== '' ? ` AND ${condition}` : '';
          if (String(operation).toLowerCase() === 'delete') clauses.push(`WHEN MATCHED${guard} THEN DELETE`);
          else {
            if (update.length === 0) this.fail(component, 'updateMapping', 'an Update needs the update mapping.');
            clauses.push(`WHEN MATCHED${guard} THEN UPDATE SET ${setList}`);
          }
        }
      } else if (update.length > 0) clauses.push(`WHEN MATCHED THEN UPDATE SET ${setList}`);
      if (yes(component.parameters.includeNotMatched)) {
        if (insert.length === 0) this.fail(component, 'insertMapping', 'inserting rows not matched needs the insert mapping.');
        clauses.push(
          `WHEN NOT MATCHED THEN INSERT (${insert.map(([input, output]) => q(output || input)).join(', ')}) VALUES (${insert.map(([input]) => `${q(sourceAlias)}.${q(input)}`).join(', ')})`,
        );
      }
      if (clauses.length === 0) this.fail(component, 'whenMatched', 'says neither what to update nor what to insert.');
      statements.push(
        `MERGE INTO ${target} AS ${q(targetAlias)} USING (${query}) AS ${q(sourceAlias)} ON ${on} ${clauses.join(' ')}`,
      );
    }
    const columns: Record<string, ColumnOrigin[]> = {};
    for (const [input, output] of written ?? []) {
      const from = origins?.get(input);
      if (from !== undefined) columns[output] = unique([...(columns[output] ?? []), ...from]);
    }
    return {
      component: component.name,
      type: component.type,
      statements,
      ...(Object.keys(columns).length > 0 && { columnLineage: { target: targetTable, columns } }),
    };
  }
}

/**
 * The statements of every output of `pipeline`, outputs in file order. Throws PipelineFileError naming
 * the component and parameter of the first thing that cannot compile.
 */
export function compileTransformation(pipeline: Pipeline, ctx: CompileContext): CompiledOutput[] {
  if (pipeline.kind !== 'transformation') throw new PipelineFileError('Only a transformation pipeline compiles to SQL.');
  const compiler = new Compiler(pipeline, ctx);
  const outputs = [...pipeline.components.values()].filter(
    (c) => (OUTPUT_TYPES as readonly string[]).includes(c.type) && !c.skipped,
  );
  if (outputs.length === 0)
    throw new PipelineFileError('The transformation has no output component (table-output, rewrite-table or table-update).');
  return outputs.map((component) => compiler.output(component));
}
