import type { FastifyBaseLogger } from 'fastify';
import type OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import type { AiModelConfig } from '../../core/config.ts';
import type { TaskMessageData } from './schemas.ts';
import type { TaskRow } from './repository.ts';
import { toolsFor } from './tools.ts';
import { argumentsTextOf } from './arguments.ts';

/** The model could not be used for this turn; the message says why, for the task's statusDetail. */
export class ModelFailure extends Error {}

/** The call to the model was aborted through its signal (a deadline, the server shutting down). */
export class ModelAborted extends Error {}

export interface ModelToolCall {
  id: string;
  name: string;
  /** The arguments as the model wrote them (JSON text, if the model behaves). */
  argumentsText: string;
}

export interface ModelTurn {
  text: string | null;
  toolCalls: ModelToolCall[];
}

export interface ChatModel {
  /** One answer of the model to the conversation so far; aborted through `signal`. */
  answer(messages: ChatCompletionMessageParam[], tools: ChatCompletionTool[], signal: AbortSignal): Promise<ModelTurn>;
}

export const NO_MODEL =
  "No language model is configured: set DPC_AI_MODEL (and DPC_AI_MODEL_BASE_URL for a server other than OpenAI's, DPC_AI_MODEL_API_KEY if it needs a key).";

/** The configured model through the official OpenAI client, or undefined when none is configured. */
export function configuredModel(config: AiModelConfig, log: FastifyBaseLogger): ChatModel | undefined {
  if (!config.name) return undefined;
  const model = config.name;
  const where = config.baseUrl ?? 'https://api.openai.com/v1';
  // The client (a hundred and fifty modules) is loaded with the first call: a server whose tasks never
  // reach the model does not hold it. It insists on a key; local servers (llama.cpp, Ollama, vLLM) take any.
  let loaded: Promise<{ OpenAI: typeof OpenAI; client: OpenAI }> | undefined;
  const load = async () => {
    const { default: OpenAI } = await import('openai');
    const client = new OpenAI({
      baseURL: where,
      apiKey: config.apiKey ?? 'none',
      timeout: config.timeoutMs,
      maxRetries: 2,
      // Warnings only (retries): the client's debug output would carry the request.
      logger: log.child({ component: 'ai-model' }),
      logLevel: 'warn',
    });
    return { OpenAI, client };
  };
  return {
    async answer(messages, tools, signal) {
      loaded ??= load();
      const { OpenAI, client } = await loaded;
      let completion: unknown;
      try {
        completion = await client.chat.completions.create({ model, messages, tools }, { signal });
      } catch (error) {
        if (error instanceof OpenAI.APIUserAbortError) throw new ModelAborted();
        if (error instanceof OpenAI.APIConnectionTimeoutError) {
          throw new ModelFailure(`The model did not answer within ${config.timeoutMs} ms (DPC_AI_MODEL_TIMEOUT_MS).`);
        }
        if (error instanceof OpenAI.APIConnectionError)
          throw new ModelFailure(`The model server at ${where} could not be reached.`);
        if (error instanceof OpenAI.APIError) {
          throw new ModelFailure(`The model server answered ${error.status ?? 'an error'}: ${oneLine(error.message)}`);
        }
        if (error instanceof SyntaxError) throw new ModelFailure('The model server answered with JSON that does not parse.');
        throw error;
      }
      return turnOf(completion);
    },
  };
}

function oneLine(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > 300 ? `${line.slice(0, 300)}...` : line;
}

/** The model's turn out of a chat completion, or a ModelFailure saying what is wrong with the answer. */
export function turnOf(completion: unknown): ModelTurn {
  const unusable = (why: string) => new ModelFailure(`The model's answer is not a usable chat completion: ${why}.`);
  if (typeof completion !== 'object' || completion === null) throw unusable('it is not a JSON object');
  const choices = (completion as { choices?: unknown }).choices;
  if (!Array.isArray(choices) || choices.length === 0) throw unusable('it has no choices');
  const message = (choices[0] as { message?: unknown } | null)?.message as
    { content?: unknown; tool_calls?: unknown } | undefined;
  if (typeof message !== 'object' || message === null) throw unusable('its first choice has no message');
  if (message.content !== undefined && message.content !== null && typeof message.content !== 'string') {
    throw unusable('the message content is not text');
  }
  const calls = message.tool_calls ?? [];
  if (!Array.isArray(calls)) throw unusable('tool_calls is not a list');
  const toolCalls = calls.map((call, index) => {
    const fn = (call as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
    const id = (call as { id?: unknown } | null)?.id;
    if (typeof fn?.name !== 'string' || typeof id !== 'string' || !id)
      throw unusable(`tool call ${index} has no id or function name`);
    return {
      id,
      name: fn.name,
      argumentsText: typeof fn.arguments === 'string' ? fn.arguments : argumentsTextOf(fn.arguments),
    };
  });
  const text = typeof message.content === 'string' && message.content.trim() ? message.content : null;
  if (text === null && toolCalls.length === 0) throw unusable('it holds neither text nor tool calls');
  return { text, toolCalls };
}

/** The tools of a task in the chat completions form. */
export function toolDefinitions(task: TaskRow): ChatCompletionTool[] {
  return toolsFor(task.mode).map((tool) => ({
    type: 'function',
    function: {
      name: tool.name,
      description: `${tool.description} (${tool.access === 'WRITE' ? 'writes' : 'reads'})`,
      parameters: JSON.parse(JSON.stringify(tool.parameters)) as Record<string, unknown>,
    },
  }));
}

function systemPrompt(task: TaskRow): string {
  const lines = [
    `You are "${task.agentName}", an AI agent working on a data-pipeline project through tools.`,
    `Project ${task.projectId}, environment "${task.environmentName}".`,
    `You work in the folder "${task.workingDirectory || '/'}" of the project's Git repository, which you read at branch "${task.sourceBranchName}"; tool paths are relative to that folder.`,
    task.mode === 'ACT'
      ? `Mode ACT: write_files commits the files you write to branch "${task.targetBranchName}".`
      : 'Mode PLAN: you cannot write; propose the changes (with file contents) in your answer instead.',
    'Pipelines are YAML files ending in .orch.yaml (orchestration) or .tran.yaml (transformation).',
    ...(task.graphId ? [`Graph: ${task.graphId}.`] : []),
    "Some tools need the user's permission; a refused call answers with an error. When the work is done, answer with a short summary and no tool call.",
  ];
  return lines.join('\n');
}

/**
 * The conversation in the chat completions form. Each turn of the agent becomes one assistant message
 * with its tool calls, followed at once by their results (the API wants them there, whatever the user
 * said meanwhile).
 */
export function chatMessages(
  task: TaskRow,
  conversation: { groupId: string; parsed: TaskMessageData }[],
): ChatCompletionMessageParam[] {
  const results = new Map(
    conversation.filter((m) => m.parsed.type === 'TOOL_RESULT').map((m) => [m.parsed.toolCallId!, m.parsed]),
  );
  const messages: ChatCompletionMessageParam[] = [{ role: 'system', content: systemPrompt(task) }];
  let index = 0;
  while (index < conversation.length) {
    const { groupId, parsed } = conversation[index];
    if (parsed.type === 'USER_MESSAGE') {
      messages.push({ role: 'user', content: parsed.text ?? '' });
      index += 1;
    } else if (parsed.type === 'AGENT_MESSAGE' || parsed.type === 'TOOL_CALL') {
      let text: string | null = null;
      const calls: TaskMessageData[] = [];
      for (; index < conversation.length && conversation[index].groupId === groupId; index += 1) {
        const part = conversation[index].parsed;
        if (part.type === 'AGENT_MESSAGE') text = part.text ?? null;
        if (part.type === 'TOOL_CALL') calls.push(part);
      }
      messages.push({
        role: 'assistant',
        content: text,
        ...(calls.length > 0 && {
          tool_calls: calls.map((call) => ({
            id: call.toolCallId!,
            type: 'function' as const,
            function: {
              name: call.toolName!,
              arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {}),
            },
          })),
        }),
      });
      for (const call of calls) {
        const result = results.get(call.toolCallId!);
        messages.push({
          role: 'tool',
          tool_call_id: call.toolCallId!,
          content: JSON.stringify(
            result === undefined ? { error: 'Not run.' } : result.error !== undefined ? { error: result.error } : result.result,
          ),
        });
      }
    } else {
      index += 1;
    }
  }
  return messages;
}
