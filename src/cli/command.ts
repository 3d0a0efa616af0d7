import type { ParseArgsConfig } from 'node:util';

/** What each exit status of dpc means; scripts may rely on these. */
export const EXIT = {
  ok: 0,
  /** The operation failed: something named does not exist, or the server answered an error. */
  failed: 1,
  /** The command line is wrong (unknown command or option, missing or bad value). */
  usage: 2,
  /** The configuration (environment) is not valid. */
  config: 3,
  /** The server could not be reached, or refused the client's credentials. */
  unreachable: 4,
} as const;

/** A failure with the exit status that says what failed. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT.failed,
  ) {
    super(message);
  }
}

export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
  }
}

export type Options = NonNullable<ParseArgsConfig['options']>;
export type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** What a command is given: its option values, its positional arguments (after the command words), and output. */
export interface Invocation {
  values: Values;
  args: string[];
  out: NodeJS.WritableStream;
  err: NodeJS.WriteStream;
}

/**
 * One subcommand, self-contained: its words ("clients revoke"), its help and options, and its handler.
 * Add a command by writing one of these and listing it in `commands` (src/cli/main.ts).
 */
export interface Command {
  name: string;
  /** Arguments after the command words, as shown in help: "CLIENT_ID". */
  usage?: string;
  summary: string;
  /** Further help text shown by `dpc <command> --help`. */
  details?: string;
  options?: Options;
  /** Help text for each option, by option name. */
  optionHelp?: Record<string, string>;
  /** Whether the command prints a list (then `--format table` is offered). */
  lists?: boolean;
  run(invocation: Invocation): Promise<void>;
}

export function required(values: Values, flag: string): string {
  const value = values[flag];
  if (typeof value !== 'string' || value === '') throw new UsageError(`--${flag} is required`);
  return value;
}

export function printJson(out: NodeJS.WritableStream, value: unknown): void {
  out.write(`${JSON.stringify(value)}\n`);
}

/** A list as JSON (one array) or, with --format table, as aligned columns with a header. */
export function printList<Row extends object>(invocation: Invocation, rows: Row[], columns: (keyof Row & string)[]): void {
  if (invocation.values.format !== 'table') return printJson(invocation.out, rows);
  const cells = [
    columns as string[],
    ...rows.map((row) => columns.map((column) => (row[column] == null ? '-' : String(row[column])))),
  ];
  const widths = columns.map((_, i) => Math.max(...cells.map((line) => line[i].length)));
  for (const line of cells)
    invocation.out.write(
      `${line
        .map((cell, i) => cell.padEnd(widths[i]))
        .join('  ')
        .trimEnd()}\n`,
    );
}
