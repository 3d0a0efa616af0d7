import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError } from '../core/config.ts';
import { CliError, EXIT, UsageError, type Command, type Options } from './command.ts';
import { serveCommand } from './serve.ts';
import { storeCommands } from './store-commands.ts';
import { clientCommands } from './api-client.ts';
import { agentRunCommand } from './agent-command.ts';

/** Every subcommand; add yours here. */
const commands: Command[] = [serveCommand, ...storeCommands, ...clientCommands, agentRunCommand];

const GLOBAL_OPTIONS: Options = { help: { type: 'boolean', short: 'h' } };
const LIST_OPTIONS: Options = { format: { type: 'string' } };

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

function signature(command: Command): string {
  return `dpc ${command.name}${command.usage ? ` ${command.usage}` : ''}`;
}

function overview(): string {
  const width = Math.max(...commands.map((c) => signature(c).length - 4));
  const lines = commands.map((c) => `  ${signature(c).slice(4).padEnd(width)}  ${c.summary}`);
  return (
    'dpc: the platform-api server, its administration, and a client of its API\n\n' +
    `Usage: dpc <command> [options]     dpc <command> --help     dpc --version\n\nCommands:\n${lines.join('\n')}\n\n` +
    'Administration commands work on the store the server uses: PostgreSQL when DATABASE_URL is set, else\n' +
    'SQLite under DPC_DATA_DIR (default ./data). "api" and "publish" talk to a running server instead.\n' +
    'Exit status: 0 done, 1 the operation failed, 2 bad command line, 3 bad configuration,\n' +
    '4 server unreachable or credentials refused. See the README for every setting.\n'
  );
}

function commandHelp(command: Command): string {
  const options = Object.entries(command.options ?? {}).map(([name, option]) => {
    const flag = `--${name}${option.type === 'string' ? ` ${name.toUpperCase()}` : ''}`;
    return [flag, command.optionHelp?.[name] ?? ''];
  });
  if (command.lists) options.push(['--format json|table', 'json (default) or a table with a header line']);
  options.push(['-h, --help', 'this help']);
  const width = Math.max(...options.map(([flag]) => flag.length));
  return (
    `Usage: ${signature(command)}${command.options || command.lists ? ' [options]' : ''}\n\n${command.summary}\n` +
    (command.details ? `\n${command.details}\n` : '') +
    `\nOptions:\n${options.map(([flag, help]) => `  ${flag.padEnd(width)}  ${help}`.trimEnd()).join('\n')}\n`
  );
}

/** The command whose words lead argv (the longest match), and what follows them. */
function findCommand(argv: string[]): { command?: Command; words: string[]; rest: string[] } {
  const firstOption = argv.findIndex((arg) => arg.startsWith('-'));
  const leading = firstOption === -1 ? argv : argv.slice(0, firstOption);
  let found: Command | undefined;
  for (const command of commands) {
    const words = command.name.split(' ');
    if (words.every((word, i) => leading[i] === word) && words.length > (found?.name.split(' ').length ?? 0)) found = command;
  }
  const count = found ? found.name.split(' ').length : 0;
  return { command: found, words: leading, rest: argv.slice(count) };
}

export async function main(argv: string[]): Promise<void> {
  const out = process.stdout;
  if (argv[0] === '--version' || argv[0] === '-v') return void out.write(`${VERSION}\n`);
  const asked = argv[0] === 'help' ? argv.slice(1) : argv;
  const { command, words, rest } = findCommand(asked);
  if (!command) {
    const wantsHelp = argv[0] === 'help' || asked.length === 0 || asked.includes('--help') || asked.includes('-h');
    // "dpc clients --help" lists the commands of that group.
    const group = commands.filter((c) => words.length > 0 && c.name.startsWith(`${words.join(' ')} `));
    if (wantsHelp && group.length) return void out.write(group.map((c) => `${commandHelp(c)}`).join('\n'));
    if (wantsHelp && words.length === 0) return void out.write(overview());
    throw new UsageError(`unknown command "${words.join(' ')}"`);
  }
  if (argv[0] === 'help') return void out.write(commandHelp(command));
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    strict: true,
    options: { ...GLOBAL_OPTIONS, ...(command.lists ? LIST_OPTIONS : {}), ...command.options },
  });
  if (values.help) return void out.write(commandHelp(command));
  if (values.format !== undefined && values.format !== 'json' && values.format !== 'table') {
    throw new UsageError('--format must be json or table');
  }
  if (!command.usage && positionals.length) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  await command.run({ values, args: positionals, out, err: process.stderr });
}

/** The exit status of a failure, and its one-line message on stderr. */
export function reportFailure(error: unknown, command = 'dpc'): number {
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`${command}: ${message}\n`);
  if (error instanceof ConfigError) return EXIT.config;
  if (error instanceof UsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
    process.stderr.write('Run "dpc --help" (or "dpc <command> --help") for usage.\n');
    return EXIT.usage;
  }
  return error instanceof CliError ? error.exitCode : EXIT.failed;
}
