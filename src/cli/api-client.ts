import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { CliError, EXIT, required, UsageError, type Command, type Invocation } from './command.ts';
import { parsePipelineFile, PipelineFileError, type VariableValues } from '../contract/pipeline-file.ts';
import { SQL_DIALECTS } from '../contract/sql-dialect.ts';
import { compileTransformation } from '../contract/transformation.ts';

const PROFILE_TYPE = 'application/vnd.matillion.connector-profile+json';

const CLIENT_ENVIRONMENT =
  'Reads DPC_URL (the server, default http://127.0.0.1:8080), DPC_CLIENT_ID and DPC_CLIENT_SECRET\n' +
  '(an API client of the account). The secret and the token are never printed.';

/** Talks to a running server with a client id and secret from the environment, as any API client would. */
class ApiClient {
  private token?: string;

  constructor(
    readonly baseUrl: string,
    private readonly clientId: string,
    private readonly clientSecret: string,
  ) {}

  static fromEnvironment(env: NodeJS.ProcessEnv = process.env): ApiClient {
    const clientId = env.DPC_CLIENT_ID;
    const clientSecret = env.DPC_CLIENT_SECRET;
    if (!clientId || !clientSecret) throw new CliError('DPC_CLIENT_ID and DPC_CLIENT_SECRET must be set', EXIT.config);
    const baseUrl = (env.DPC_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
    if (!URL.canParse(baseUrl) || !/^https?:$/.test(new URL(baseUrl).protocol)) {
      throw new CliError(`DPC_URL must be an http(s) URL, got "${baseUrl}"`, EXIT.config);
    }
    return new ApiClient(baseUrl, clientId, clientSecret);
  }

  private async send(url: string, init: RequestInit): Promise<Response> {
    try {
      return await fetch(url, init);
    } catch (error) {
      throw new CliError(`cannot reach ${this.baseUrl}: ${(error as Error).cause ?? (error as Error).message}`, EXIT.unreachable);
    }
  }

  private async bearer(): Promise<string> {
    if (this.token) return this.token;
    const answer = await this.send(`${this.baseUrl}/oauth/dpc/token`, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'client_credentials', client_id: this.clientId, client_secret: this.clientSecret }),
    });
    if (!answer.ok) throw new CliError(`the server refused the client credentials (${answer.status})`, EXIT.unreachable);
    this.token = ((await answer.json()) as { access_token: string }).access_token;
    return this.token;
  }

  /** A request to `/dpc` + apiPath ("/v1/projects"; "/dpc/v1/projects" is taken too). */
  async request(method: string, apiPath: string, init: { body?: BodyInit; headers?: Record<string, string> } = {}) {
    const relative = apiPath.startsWith('/dpc/') ? apiPath : `/dpc${apiPath.startsWith('/') ? '' : '/'}${apiPath}`;
    return this.send(`${this.baseUrl}${relative}`, {
      method,
      headers: { ...init.headers, authorization: `Bearer ${await this.bearer()}` },
      body: init.body,
      ...(init.body instanceof ReadableStream ? { duplex: 'half' } : {}),
    });
  }

  /** Forgets the token, so that the next request asks for a new one (it may have expired). */
  forgetToken(): void {
    this.token = undefined;
  }

  /** The JSON answer of a GET; an error answer fails the command. */
  async getJson<T>(apiPath: string): Promise<T> {
    const answer = await this.request('GET', apiPath);
    if (!answer.ok) throw new CliError(`GET ${apiPath} answered ${answer.status}: ${await answer.text()}`);
    return (await answer.json()) as T;
  }
}

interface ReviewFinding {
  rule: string;
  severity: 'ERROR' | 'WARNING';
  file: string;
  component?: string;
  parameter?: string;
  message: string;
}

/**
 * The server's review of the folder's pipeline files, as they would be published: each finding on a line of
 * stderr; an error stops the publish (exit 1), warnings do not.
 */
async function reviewBeforePublish(
  client: ApiClient,
  projectId: string,
  environmentName: string,
  files: { name: string; content: string }[],
  err: NodeJS.WritableStream,
): Promise<void> {
  const pipelines = Object.fromEntries(
    files.filter((file) => /\.(orch|tran)\.yaml$/.test(file.name)).map((file) => [file.name, file.content]),
  );
  const answer = await client.request('POST', `/v1/projects/${encodeURIComponent(projectId)}/reviews`, {
    body: JSON.stringify({ environmentName, files: pipelines }),
    headers: { 'content-type': 'application/json' },
  });
  if (!answer.ok) throw new CliError(`the review answered ${answer.status}: ${await answer.text()}`);
  const review = (await answer.json()) as { findings: ReviewFinding[]; errors: number; warnings: number };
  for (const f of review.findings) {
    const at = [f.component, f.parameter].filter(Boolean).join('.');
    err.write(`${f.severity} ${f.rule} ${f.file}${at ? ` ${at}` : ''}: ${f.message}\n`);
  }
  err.write(
    `review: ${review.errors} error(s), ${review.warnings} warning(s) in ${Object.keys(pipelines).length} pipeline file(s)\n`,
  );
  if (review.errors > 0) throw new CliError(`the review found ${review.errors} error(s); nothing was published`);
}

/** Text files only (UTF-8 without NUL bytes), as the server stores them; dot folders (.git) are left out. */
async function projectFiles(root: string): Promise<{ files: { name: string; content: string }[]; skipped: string[] }> {
  const decoder = new TextDecoder('utf-8', { fatal: true });
  const files: { name: string; content: string }[] = [];
  const skipped: string[] = [];
  const entries = await readdir(root, { recursive: true, withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
    throw new UsageError(`cannot read ${root}: ${error.code ?? error.message}`);
  });
  for (const entry of entries) {
    if (!entry.isFile()) continue;
    const full = path.join(entry.parentPath, entry.name);
    const name = path.relative(root, full).split(path.sep).join('/');
    if (name.split('/').some((segment) => segment.startsWith('.'))) continue;
    const bytes = await readFile(full);
    try {
      if (bytes.includes(0)) throw new TypeError('NUL byte');
      files.push({ name, content: decoder.decode(bytes) });
    } catch {
      skipped.push(name);
    }
  }
  files.sort((a, b) => (a.name < b.name ? -1 : 1));
  return { files, skipped };
}

/** Reports upload progress: a redrawn bar on a terminal, a plain line per quarter otherwise. */
function progressReporter(err: NodeJS.WriteStream, total: number): (sent: number) => void {
  let lastQuarter = -1;
  return (sent) => {
    const fraction = total === 0 ? 1 : sent / total;
    if (err.isTTY) {
      const width = 30;
      const filled = Math.round(fraction * width);
      err.write(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${Math.floor(fraction * 100)}% ${sent}/${total} bytes`);
      if (sent === total) err.write('\n');
    } else if (Math.floor(fraction * 4) > lastQuarter) {
      lastQuarter = Math.floor(fraction * 4);
      err.write(`uploaded ${sent} of ${total} bytes\n`);
    }
  };
}

/** The body as a stream of 64 KiB chunks, telling `onProgress` the bytes handed over so far. */
function countedStream(body: Uint8Array, onProgress: (sent: number) => void): ReadableStream<Uint8Array> {
  const chunk = 64 * 1024;
  let offset = 0;
  return new ReadableStream({
    pull(controller) {
      if (offset >= body.length) {
        onProgress(body.length);
        return controller.close();
      }
      controller.enqueue(body.subarray(offset, offset + chunk));
      offset = Math.min(offset + chunk, body.length);
      if (offset < body.length) onProgress(offset);
    },
  });
}

/** Prints an answer body as it came; an error status fails the command (exit 1). */
async function relay(invocation: Invocation, answer: Response, what: string): Promise<void> {
  const text = await answer.text();
  if (text) invocation.out.write(text.endsWith('\n') ? text : `${text}\n`);
  if (!answer.ok) throw new CliError(`${what} answered ${answer.status}`);
}

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/**
 * Follows GET /v1/events/stream, printing each event's JSON on a line of its own, and reconnects after a
 * disconnect (a server restart, another instance behind a load balancer) with Last-Event-ID, so that
 * nothing is missed or printed twice. Ends after `count` events, if given.
 */
async function tailEvents(
  invocation: Invocation,
  client: ApiClient,
  options: { query: string; after?: string; count?: number },
): Promise<void> {
  let lastEventId = options.after;
  let printed = 0;
  let failures = 0;
  for (;;) {
    const headers: Record<string, string> = { accept: 'text/event-stream' };
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
    let answer: Response;
    try {
      answer = await client.request('GET', `/v1/events/stream${options.query}`, { headers });
    } catch (error) {
      if (++failures > 30) throw error;
      invocation.err.write(`${(error as Error).message}; trying again\n`);
      await new Promise((resolve) => setTimeout(resolve, 2000));
      continue;
    }
    if (answer.status === 401 && failures++ < 3) {
      client.forgetToken();
      continue;
    }
    if (!answer.ok) {
      const text = await answer.text();
      throw new CliError(`GET /v1/events/stream answered ${answer.status}: ${text}`);
    }
    failures = 0;
    const decoder = new TextDecoder();
    let pending = '';
    try {
      for await (const chunk of answer.body as unknown as AsyncIterable<Uint8Array>) {
        pending += decoder.decode(chunk, { stream: true });
        let end: number;
        while ((end = pending.indexOf('\n\n')) >= 0) {
          const frame = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const fields = new Map<string, string>();
          for (const line of frame.split('\n')) {
            const colon = line.indexOf(':');
            if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).replace(/^ /, ''));
          }
          const data = fields.get('data');
          if (data === undefined) continue;
          invocation.out.write(`${data}\n`);
          lastEventId = fields.get('id') ?? lastEventId;
          printed += 1;
          if (options.count !== undefined && printed >= options.count) return;
        }
      }
    } catch {
      // The connection broke: resume below.
    }
    invocation.err.write(`the stream ended; resuming after event ${lastEventId ?? '(none)'}\n`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

export const clientCommands: Command[] = [
  {
    name: 'events tail',
    summary: "Follow the account's events as they happen: one JSON object a line, resuming after disconnects.",
    details:
      'Reads GET /v1/events/stream (Server-Sent Events). After a disconnect it reconnects with the id of the\n' +
      `last event printed, so nothing is missed or printed twice. Ctrl-C ends it.\n${CLIENT_ENVIRONMENT}`,
    options: { type: { type: 'string' }, project: { type: 'string' }, after: { type: 'string' }, count: { type: 'string' } },
    optionHelp: {
      type: 'comma-separated event types; a type ending in * is a prefix (pipeline-execution.*)',
      project: 'only events of this project id',
      after: 'start after this event id (default: with the next event)',
      count: 'end after printing this many events',
    },
    async run(invocation) {
      const { values } = invocation;
      if (invocation.args.length) throw new UsageError('events tail takes no arguments');
      const query = new URLSearchParams();
      if (typeof values.type === 'string') query.set('type', values.type);
      if (typeof values.project === 'string') query.set('projectId', values.project);
      const after = typeof values.after === 'string' ? values.after : undefined;
      if (after !== undefined && !/^\d{1,15}$/.test(after)) throw new UsageError('--after must be an event id (a whole number)');
      const count = typeof values.count === 'string' ? Number(values.count) : undefined;
      if (count !== undefined && !(Number.isInteger(count) && count > 0))
        throw new UsageError('--count must be a positive whole number');
      const search = query.toString();
      await tailEvents(invocation, ApiClient.fromEnvironment(), { query: search ? `?${search}` : '', after, count });
    },
  },
  {
    name: 'api',
    usage: 'METHOD PATH',
    summary: 'Call any operation of a running server: dpc api GET /v1/projects; prints the answer body.',
    details: `PATH is under /dpc ("/v1/projects"). An answer of 400 or more exits 1.\n${CLIENT_ENVIRONMENT}`,
    options: { data: { type: 'string' } },
    optionHelp: { data: 'a JSON body to send' },
    async run(invocation) {
      const [method, apiPath, ...rest] = invocation.args;
      if (!method || !apiPath || rest.length) throw new UsageError('give METHOD and PATH');
      if (!METHODS.includes(method.toUpperCase())) throw new UsageError(`METHOD must be one of ${METHODS.join(', ')}`);
      if (!apiPath.startsWith('/')) throw new UsageError('PATH must start with /');
      const data = invocation.values.data;
      if (typeof data === 'string') {
        try {
          JSON.parse(data);
        } catch {
          throw new UsageError('--data must be JSON');
        }
      }
      const client = ApiClient.fromEnvironment();
      const answer = await client.request(
        method.toUpperCase(),
        apiPath,
        typeof data === 'string' ? { body: data, headers: { 'content-type': 'application/json' } } : {},
      );
      await relay(invocation, answer, `${method.toUpperCase()} ${apiPath}`);
    },
  },
  {
    name: 'publish',
    usage: 'DIR',
    summary: 'Upload a project folder as an artifact version, with the connector profiles; prints the answer.',
    details:
      'Every text file under DIR is a part named by its relative path (dot folders such as .git and\n' +
      'files that are not UTF-8 text are left out and named on stderr). The flex and custom connector\n' +
      'profiles of the account (GET /v1/flex-connectors, /v1/custom-connectors) are added as parts\n' +
      'connector-profile:flex-<alternateId>.json and connector-profile:custom-<id>.json.\n' +
      'With --review the pipeline files are reviewed first (POST /v1/projects/{id}/reviews, the rules a run\n' +
      'start applies): every finding goes to stderr, and an error publishes nothing (exit 1).\n' +
      `Progress goes to stderr: a bar on a terminal, plain lines otherwise.\n${CLIENT_ENVIRONMENT}`,
    options: {
      project: { type: 'string' },
      environment: { type: 'string' },
      version: { type: 'string' },
      branch: { type: 'string' },
      commit: { type: 'string' },
      review: { type: 'boolean' },
    },
    optionHelp: {
      project: 'project id (required)',
      environment: 'environment name (required)',
      version: 'version name (required)',
      branch: 'branch recorded with the version',
      commit: 'commit hash recorded with the version',
      review: 'review the pipeline files first; publish only if the review finds no error',
    },
    async run(invocation) {
      const { values, args, err } = invocation;
      if (args.length !== 1) throw new UsageError('give exactly one DIR');
      const projectId = required(values, 'project');
      const environmentName = required(values, 'environment');
      const versionName = required(values, 'version');
      const { files, skipped } = await projectFiles(path.resolve(args[0]));
      for (const name of skipped) err.write(`skipped ${name}: not UTF-8 text\n`);

      const client = ApiClient.fromEnvironment();
      if (values.review === true) await reviewBeforePublish(client, projectId, environmentName, files, err);
      const flex = await client.getJson<{ alternateId: string }[]>('/v1/flex-connectors');
      const custom = await client.getJson<{ id: string }[]>('/v1/custom-connectors');
      const form = new FormData();
      for (const file of files)
        form.append(file.name, new Blob([file.content], { type: 'text/plain' }), path.posix.basename(file.name));
      const profiles = [
        ...flex.map((profile) => ({ name: `connector-profile:flex-${profile.alternateId}.json`, profile })),
        ...custom.map((profile) => ({ name: `connector-profile:custom-${profile.id}.json`, profile })),
      ];
      for (const { name, profile } of profiles)
        form.append(name, new Blob([JSON.stringify(profile)], { type: PROFILE_TYPE }), name);
      err.write(`publishing ${files.length} files and ${profiles.length} connector profiles to ${client.baseUrl}\n`);

      // Encoded whole first, so that the progress has a total; a project folder fits in memory.
      const encoded = new Response(form);
      const contentType = encoded.headers.get('content-type')!;
      const body = new Uint8Array(await encoded.arrayBuffer());
      const headers: Record<string, string> = {
        'content-type': contentType,
        'content-length': String(body.length),
        versionName,
        environmentName,
      };
      if (typeof values.branch === 'string') headers.branch = values.branch;
      if (typeof values.commit === 'string') headers.commitHash = values.commit;
      const answer = await client.request('POST', `/v1/projects/${encodeURIComponent(projectId)}/artifacts`, {
        body: countedStream(body, progressReporter(err, body.length)),
        headers,
      });
      await relay(invocation, answer, 'the upload');
    },
  },
  {
    name: 'pipeline sql',
    usage: 'FILE',
    summary: 'Print the SQL a transformation pipeline (.tran.yaml) runs in the warehouse, one statement per line.',
    details:
      "The dialect is the environment's warehouse when --project and --environment are given (a client of\n" +
      'the server, as for dpc api), else --dialect (duckdb, the embedded default, or postgres). Variables\n' +
      "take the file's defaults unless --variable name=value says otherwise; [Environment Default] is\n" +
      'left to the connection (unqualified names).\n' +
      CLIENT_ENVIRONMENT,
    options: {
      project: { type: 'string' },
      environment: { type: 'string' },
      dialect: { type: 'string' },
      variable: { type: 'string', multiple: true },
    },
    optionHelp: {
      project: 'project id (with --environment: use its warehouse)',
      environment: 'environment name',
      dialect: `the warehouse dialect: ${Object.keys(SQL_DIALECTS).join(', ')} (default duckdb)`,
      variable: 'name=value, repeatable',
    },
    async run(invocation) {
      const { values, args, out } = invocation;
      if (args.length !== 1) throw new UsageError('give exactly one FILE');
      let dialectName = typeof values.dialect === 'string' ? values.dialect : undefined;
      let defaults: { defaultDatabase?: string; defaultSchema?: string } = {};
      if (typeof values.environment === 'string' && dialectName === undefined) {
        const projectId = required(values, 'project');
        const client = ApiClient.fromEnvironment();
        type Listed = { name: string; warehouse?: { type: string; defaultDatabase?: string; defaultSchema?: string } };
        let environment: Listed | undefined;
        for (let page = 0; environment === undefined; page += 1) {
          const answer = await client.getJson<{ results: Listed[] }>(
            `/v1/projects/${encodeURIComponent(projectId)}/environments?page=${page}&size=100`,
          );
          if (answer.results.length === 0) throw new CliError(`the project has no environment "${values.environment}"`);
          environment = answer.results.find((candidate) => candidate.name === values.environment);
        }
        dialectName = environment.warehouse?.type ?? 'duckdb';
        defaults = {
          defaultDatabase: environment.warehouse?.defaultDatabase,
          defaultSchema: environment.warehouse?.defaultSchema,
        };
      }
      const dialect = SQL_DIALECTS[dialectName ?? 'duckdb'];
      if (!dialect) throw new UsageError(`--dialect must be one of ${Object.keys(SQL_DIALECTS).join(', ')}`);
      let text: string;
      try {
        text = await readFile(path.resolve(args[0]), 'utf8');
      } catch (error) {
        throw new CliError(`cannot read ${args[0]}: ${(error as Error).message}`);
      }
      try {
        const pipeline = parsePipelineFile(text);
        const variables = Object.create(null) as VariableValues;
        for (const [name, declared] of Object.entries(pipeline.variables)) {
          const value = declared.defaultValue;
          if (typeof value === 'string' || typeof value === 'number') variables[name] = value;
        }
        const given = values.variable;
        for (const pair of Array.isArray(given) ? given : []) {
          const at = String(pair).indexOf('=');
          if (at <= 0) throw new UsageError(`--variable takes name=value, got "${String(pair)}"`);
          variables[String(pair).slice(0, at)] = String(pair).slice(at + 1);
        }
        for (const output of compileTransformation(pipeline, { dialect, variables, ...defaults })) {
          out.write(`-- ${output.component} (${output.type})\n`);
          for (const statement of output.statements) out.write(`${statement};\n`);
        }
      } catch (error) {
        if (error instanceof PipelineFileError || error instanceof Error) {
          if (error instanceof UsageError) throw error;
          throw new CliError(error.message);
        }
        throw error;
      }
    },
  },
];
