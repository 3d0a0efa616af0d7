import path from 'node:path';
import { runAgent } from '../agent/agent.ts';
import { required, type Command } from './command.ts';

export const agentRunCommand: Command = {
  name: 'agent run',
  summary: 'Run the reference agent: sign in, register its certificate, heartbeat and do the work the server hands it',
  details:
    'On first start the agent makes its key pair and certificate in the state folder and keeps its vault there\n' +
    '(vault.json, readable by its user only). It runs until SIGTERM or SIGINT, then finishes the work in hand.\n' +
    'DPC_AGENT_CLIENT_SECRET may hold the secret instead of --client-secret (which other users can see in ps).',
  options: {
    url: { type: 'string' },
    'client-id': { type: 'string' },
    'client-secret': { type: 'string' },
    'state-dir': { type: 'string' },
  },
  optionHelp: {
    url: "the server's root URL, e.g. http://127.0.0.1:8080",
    'client-id': "the agent's client id (POST /dpc/v1/agents/{agentId}/credentials)",
    'client-secret': "the agent's client secret (or DPC_AGENT_CLIENT_SECRET)",
    'state-dir': 'where the key, certificate and vault are kept (default ./agent-state)',
  },
  async run({ values, err }) {
    const clientSecret =
      typeof values['client-secret'] === 'string' ? values['client-secret'] : process.env.DPC_AGENT_CLIENT_SECRET;
    const agent = await runAgent({
      url: required(values, 'url'),
      clientId: required(values, 'client-id'),
      clientSecret: clientSecret || required(values, 'client-secret'),
      stateDir: path.resolve(typeof values['state-dir'] === 'string' ? values['state-dir'] : 'agent-state'),
      log: (message, fields) => err.write(`${JSON.stringify({ time: new Date().toISOString(), message, ...fields })}\n`),
    });
    err.write(`${JSON.stringify({ time: new Date().toISOString(), message: 'agent running' })}\n`);
    await new Promise<void>((resolve) => {
      const stop = () => agent.stop().then(resolve);
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
  },
};
