import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the scripted model answers: a turn (text and/or tool calls) or a raw HTTP answer (garbage, errors). */
export type ScriptedReply =
  { text?: string; toolCalls?: { name: string; arguments: unknown }[] } | { raw: string; status?: number; contentType?: string };

/** Answers the n-th call of a conversation (n = assistant messages already in it); may wait before answering. */
export type Script = ScriptedReply[] | ((turn: number, request: ChatRequest) => ScriptedReply | Promise<ScriptedReply>);

export interface ChatRequest {
  model: string;
  messages: { role: string; content?: string | null; tool_calls?: unknown[]; tool_call_id?: string }[];
  tools?: { function: { name: string } }[];
}

/**
 * An OpenAI-compatible chat completions server on 127.0.0.1 that answers from scripts. A conversation
 * picks its script by its first user message, so one server serves many tasks at once and stays
 * stateless: the turn is the number of assistant messages the request carries.
 */
export class ScriptedModel {
  readonly requests: ChatRequest[] = [];
  private readonly scripts = new Map<string, Script>();

  private constructor(
    private readonly server: http.Server,
    readonly baseUrl: string,
  ) {}

  static async start(): Promise<ScriptedModel> {
    let model: ScriptedModel | undefined;
    const server = http.createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        model!.answer(request, Buffer.concat(chunks).toString('utf8'), response).catch((error: Error) => {
          response
            .writeHead(500, { 'content-type': 'application/json' })
            .end(JSON.stringify({ error: { message: error.message } }));
        });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    model = new ScriptedModel(server, `http://127.0.0.1:${port}/v1`);
    return model;
  }

  /** The script of conversations whose first user message is `message`. */
  on(message: string, script: Script): void {
    this.scripts.set(message, script);
  }

  /** Requests of the conversation started by `message`. */
  requestsOf(message: string): ChatRequest[] {
    return this.requests.filter((request) => request.messages.find((m) => m.role === 'user')?.content === message);
  }

  private async answer(request: http.IncomingMessage, body: string, response: http.ServerResponse): Promise<void> {
    if (request.method !== 'POST' || request.url !== '/v1/chat/completions') {
      response.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
      return;
    }
    const chat = JSON.parse(body) as ChatRequest;
    this.requests.push(chat);
    const first = chat.messages.find((m) => m.role === 'user')?.content ?? '';
    const script = this.scripts.get(first);
    if (!script) throw new Error(`no script for "${first}"`);
    const turn = chat.messages.filter((m) => m.role === 'assistant').length;
    const reply = typeof script === 'function' ? await script(turn, chat) : (script[turn] ?? { text: 'Out of script.' });
    if ('raw' in reply) {
      response.writeHead(reply.status ?? 200, { 'content-type': reply.contentType ?? 'application/json' }).end(reply.raw);
      return;
    }
    const toolCalls = (reply.toolCalls ?? []).map((call, index) => ({
      id: `call_${turn}_${index}`,
      type: 'function',
      function: {
        name: call.name,
        arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments),
      },
    }));
    const completion = {
      id: `chatcmpl-${turn}`,
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: chat.model,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: reply.text ?? null, ...(toolCalls.length > 0 && { tool_calls: toolCalls }) },
          finish_reason: toolCalls.length > 0 ? 'tool_calls' : 'stop',
        },
      ],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    };
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(completion));
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.closeAllConnections();
      this.server.close(() => resolve());
    });
  }
}
