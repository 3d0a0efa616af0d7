// The console: hash routes (#/runs, #/runs/{projectId}/{runId}, ...), each a view built from the public API.
import { api, allPages, ApiError, canWrite, current, firstItems, live, poll, signIn, signInWithToken, signOut } from './api.js';
import { drawGantt, drawGraph, graphOf } from './draw.js';
import { badge, duration, errorBox, field, h, say, select, table, when } from './ui.js';

const main = document.getElementById('main');
const FINAL = new Set(['SUCCESS', 'FAILED', 'CANCELLED', 'FORBIDDEN', 'SKIPPED']);
let stopView = () => {};
const enc = encodeURIComponent;

function show(title, ...content) {
  document.title = `${title} · DPC console`;
  main.replaceChildren(h('h1', {}, title), ...content);
}

/** A button that runs `action`, says what happened, and shows a refusal (403 for a viewer) in the page. */
function actionButton(text, action, attrs = {}) {
  const button = h('button', { type: 'button', ...attrs }, text);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await action();
    } catch (error) {
      button.after(errorBox(error));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

let projectsCache = null;
const projects = async () => (projectsCache ??= await allPages('/projects'));
const projectName = (list, id) => list.find((p) => p.id === id)?.name ?? id;

async function pipelineFile(projectId, environmentName, name, versionName) {
  const details = await api(
    'GET',
    `/projects/${projectId}/artifacts/details?environmentName=${enc(environmentName)}${versionName ? `&versionName=${enc(versionName)}` : ''}`,
  );
  const version = details.details?.versionName ?? versionName;
  const text = await api(
    'GET',
    `/projects/${projectId}/artifacts/assets?environmentName=${enc(environmentName)}&versionName=${enc(version)}&path=${enc(name)}`,
  );
  const { parse } = await import('./vendor/yaml/index.js');
  return { version, document: parse(text) };
}

// ---- views -------------------------------------------------------------------------------------------

function signInView() {
  const id = h('input', { name: 'clientId', autocomplete: 'username', required: true });
  const secret = h('input', { name: 'clientSecret', type: 'password', autocomplete: 'current-password', required: true });
  const problem = h('div');
  const form = h(
    'form',
    { className: 'stack', 'aria-label': 'Sign in' },
    h(
      'p',
      { className: 'muted' },
      "Sign in with an API client's credentials. They are kept in this page's memory only: a reload signs you out.",
    ),
    field('Client ID', id),
    field('Client secret', secret),
    h('button', { type: 'submit' }, 'Sign in'),
  );
  const token = h('input', { name: 'accessToken', type: 'password', autocomplete: 'off', required: true });
  const byToken = h(
    'form',
    { className: 'stack', 'aria-label': 'Sign in with an access token' },
    h('p', { className: 'muted' }, 'Or with an access token (from POST /oauth/dpc/token); it is not renewed when it expires.'),
    field('Access token', token),
    h('button', { type: 'submit', className: 'secondary' }, 'Use the token'),
  );
  const enter = async (how) => {
    try {
      await how();
      secret.value = '';
      token.value = '';
      location.hash = location.hash && location.hash !== '#/signin' ? location.hash : '#/runs';
      route();
    } catch (error) {
      problem.replaceChildren(errorBox(error));
    }
  };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    enter(() => signIn(id.value.trim(), secret.value));
  });
  byToken.addEventListener('submit', (event) => {
    event.preventDefault();
    enter(() => signInWithToken(token.value.trim()));
  });
  show('Sign in', form, byToken, problem);
  id.focus();
}

async function projectsView() {
  const list = await projects();
  show(
    'Projects',
    table(
      ['Project', 'Description'],
      list.map((p) => [h('a', { href: `#/projects/${p.id}` }, p.name), p.description ?? '']),
    ),
  );
}

async function projectView(projectId) {
  const list = await projects();
  const environments = await allPages(`/projects/${projectId}/environments`);
  const sections = [];
  for (const env of environments) {
    const [published, versions] = await Promise.all([
      api('GET', `/projects/${projectId}/published-pipelines?environmentName=${enc(env.name)}&size=100`),
      api('GET', `/projects/${projectId}/artifacts?environmentName=${enc(env.name)}&size=20`),
    ]);
    sections.push(
      h('h2', {}, `Environment ${env.name}`),
      h('p', { className: 'muted' }, `Default agent: ${env.defaultAgentName ?? env.defaultAgentId ?? 'platform-hosted'}`),
      published.results.length
        ? table(
            ['Pipeline', 'Published', ''],
            published.results.map((p) => [
              h('a', { href: `#/pipeline/${projectId}/${enc(env.name)}/${enc(p.name)}` }, p.name),
              when(p.publishedTime),
              canWrite() && p.name.endsWith('.orch.yaml')
                ? h('a', { href: `#/start/${projectId}/${enc(env.name)}/${enc(p.name)}` }, 'Run…')
                : '',
            ]),
          )
        : h('p', {}, 'No published version.'),
      versions.results.length
        ? table(
            ['Version', 'Deployed', 'How', 'Branch', 'Commit', 'Runnable'],
            versions.results.map((v) => [
              v.versionName,
              when(v.deployedAt),
              v.provider,
              v.branch ?? '',
              v.commitHash ? v.commitHash.slice(0, 12) : '',
              v.enabled ? 'yes' : 'disabled',
            ]),
            `Published versions of ${env.name}, the most recently deployed first${versions.total > 20 ? ` (20 of ${versions.total})` : ''}`,
          )
        : '',
    );
  }
  show(`Project ${projectName(list, projectId)}`, ...sections);
}

async function pipelineView(projectId, environmentName, name) {
  const { version, document } = await pipelineFile(projectId, environmentName, name);
  show(
    name,
    h('p', { className: 'muted' }, `Environment ${environmentName}, version ${version}, ${document?.type ?? ''} pipeline`),
    canWrite()
      ? h('p', {}, h('a', { href: `#/start/${projectId}/${enc(environmentName)}/${enc(name)}` }, 'Run this pipeline…'))
      : '',
    drawGraph(graphOf(document)),
  );
}

async function runsView(query) {
  const list = await projects();
  const filters = h(
    'form',
    { className: 'filters', 'aria-label': 'Filter runs' },
    field(
      'Status',
      select(
        'status',
        [['', 'any'], ...['RUNNING', 'SUCCESS', 'FAILED', 'CANCELLING', 'CANCELLED', 'SKIPPED', 'UNKNOWN'].map((s) => [s, s])],
        query.get('status') ?? '',
      ),
    ),
    field('Project', select('projectId', [['', 'any'], ...list.map((p) => [p.id, p.name])], query.get('projectId') ?? '')),
    field('Pipeline', h('input', { name: 'pipelineName', value: query.get('pipelineName') ?? '' })),
    field('Environment', h('input', { name: 'environmentName', value: query.get('environmentName') ?? '' })),
    field(
      'Trigger',
      select(
        'trigger',
        [['', 'any'], ...['API', 'MANUAL', 'SCHEDULE', 'SCHEDULE_RUN_NOW', 'DESIGNER', 'UNKNOWN'].map((s) => [s, s])],
        query.get('trigger') ?? '',
      ),
    ),
    field('Started after', h('input', { name: 'startedAfter', type: 'datetime-local', value: query.get('startedAfter') ?? '' })),
    h('button', { type: 'submit' }, 'Filter'),
  );
  filters.addEventListener('submit', (event) => {
    event.preventDefault();
    const chosen = new URLSearchParams();
    for (const [key, value] of new FormData(filters)) if (value) chosen.set(key, String(value));
    location.hash = `#/runs?${chosen}`;
  });
  const params = new URLSearchParams({ limit: '50' });
  for (const key of ['status', 'projectId', 'pipelineName', 'environmentName'])
    if (query.get(key)) params.set(key, query.get(key));
  if (query.get('startedAfter')) params.set('startedAfter', new Date(query.get('startedAfter')).toISOString());
  const body = h('div');
  show('Runs', filters, body);
  // Read again when a run starts, changes status or finishes (the event stream), else every 2 s.
  const runEvents = {
    type: 'pipeline-execution.*',
    projectId: query.get('projectId'),
    matches: (e) => !e.type.includes('.step-'),
  };
  stopView = live(async () => {
    const answer = await api('GET', `/pipeline-executions?${params}`);
    const trigger = query.get('trigger');
    const runs = answer.results.filter((run) => !trigger || run.trigger === trigger);
    body.replaceChildren(
      table(
        ['Run', 'Status', 'Pipeline', 'Environment', 'Trigger', 'Started', 'Duration'],
        runs.map((run) => [
          h('a', { href: `#/runs/${run.projectId}/${run.pipelineExecutionId}` }, run.pipelineExecutionId.slice(0, 8)),
          badge(run.status),
          run.pipelineName,
          run.environmentName,
          run.trigger,
          when(run.startedAt),
          duration(run.startedAt, run.finishedAt),
        ]),
        `${runs.length} runs, newest first${answer.more ? ' (more exist: narrow the filters)' : ''}`,
      ),
    );
  }, runEvents);
}

/** The most steps a run page reads and draws. */
const STEPS_SHOWN = 1000;
const count = (n) => n.toLocaleString('en-US');

async function runView(projectId, runId) {
  const base = `/projects/${projectId}/pipeline-executions/${runId}`;
  // The first STEPS_SHOWN steps; a run with more says how many it has and that the rest are left out.
  let [run, { results: steps, total: stepsTotal }] = await Promise.all([
    api('GET', base),
    firstItems(`${base}/steps`, STEPS_SHOWN),
  ]);
  const head = h('div');
  const timeline = h('section', { 'aria-label': 'Timeline' });
  const messages = h('section', { 'aria-label': 'Messages' });
  const problem = h('div');
  const render = () => {
    const buttons = [];
    if (canWrite() && !FINAL.has(run.status)) {
      buttons.push(
        actionButton('Cancel', async () => {
          run = { ...run, ...(await api('PATCH', base, { forceUpdate: false, status: 'CANCELLED' })) };
          say(`Run ${run.status.toLowerCase()}`);
          render();
        }),
        actionButton(
          'Force cancel',
          async () => {
            run = { ...run, ...(await api('PATCH', base, { forceUpdate: true, status: 'CANCELLED' })) };
            say('Run cancelled');
            render();
          },
          { className: 'danger' },
        ),
      );
    }
    if (canWrite()) {
      buttons.push(
        h(
          'a',
          { href: `#/start/${projectId}/${enc(run.environmentName)}/${enc(run.pipelineName)}?again=${runId}` },
          'Run again…',
        ),
      );
    }
    head.replaceChildren(
      h(
        'p',
        { 'data-run-status': run.status },
        badge(run.status),
        ` ${run.pipelineName} in ${run.environmentName}`,
        run.versionName ? `, version ${run.versionName}` : '',
        `, started ${when(run.startedAt)} (${run.trigger ?? ''}), ${duration(run.startedAt, run.finishedAt)}`,
      ),
      run.message
        ? h('p', { className: FINAL.has(run.status) && run.status !== 'SUCCESS' ? 'error' : 'muted' }, run.message)
        : '',
      h('div', { className: 'actions' }, buttons),
    );
    const leftOut = stepsTotal - steps.length;
    timeline.replaceChildren(
      h('h2', {}, 'Timeline'),
      leftOut > 0
        ? h(
            'p',
            { className: 'note', 'data-steps-left-out': leftOut },
            `This run has ${count(stepsTotal)} steps: the first ${count(steps.length)} are shown, ${count(leftOut)} are left out (read them all through the API: GET /dpc/v1${base}/steps?page=&size=).`,
          )
        : '',
      drawGantt(steps, run),
    );
    const said = steps.filter((step) => step.result?.message);
    messages.replaceChildren(
      h('h2', {}, 'Messages'),
      said.length
        ? table(
            ['Step', 'Status', 'Message'],
            said.map((step) => [step.name, badge(step.result.status), h('pre', {}, step.result.message)]),
          )
        : h('p', { className: 'muted' }, 'No step message yet.'),
    );
  };
  show(`Run ${runId.slice(0, 8)}`, head, problem, timeline, messages);
  render();
  // One read a tick, at most every 2 s: the run when the event stream says it moved, its steps when a step
  // started or finished (without the stream: the run, then its steps, in turn); until the run is final and
  // its steps were read after that.
  const need = { run: false, steps: false };
  let turn = 0;
  const feed = { type: 'pipeline-execution.*', projectId, matches: (e) => e.data?.executionId === runId };
  stopView = live(async (events) => {
    for (const event of events) need[event.type.includes('.step-') ? 'steps' : 'run'] = true;
    if (!need.run && !need.steps) need[turn++ % 2 === 0 ? 'run' : 'steps'] = true;
    const wasFinal = FINAL.has(run.status);
    if (need.run) {
      need.run = false;
      run = await api('GET', base);
    } else {
      need.steps = false;
      ({ results: steps, total: stepsTotal } = await firstItems(`${base}/steps`, STEPS_SHOWN));
      if (wasFinal) return (render(), false);
    }
    render();
    if (FINAL.has(run.status)) need.steps = true;
    return need.run || need.steps ? 'more' : true;
  }, feed);
}

/**
 * A GRID variable as a table of text inputs: a column per declared column (the file's `metadata.columns`;
 * else as many as the default's widest row), a row per row, rows added and removed with buttons.
 */
function gridEditor(name, variable, legend) {
  const defaults = Array.isArray(variable.value) ? variable.value.map((row) => (Array.isArray(row) ? row : [row])) : [];
  const columns = variable.columns?.length
    ? variable.columns
    : Array.from({ length: Math.max(1, ...defaults.map((row) => row.length)) }, (_, i) => `column ${i + 1}`);
  const body = h('tbody');
  const addRow = (values = []) => {
    const number = body.children.length + 1;
    const row = h(
      'tr',
      {},
      columns.map((column, i) =>
        h('td', {}, h('input', { 'aria-label': `${name} row ${number}, ${column}`, value: values[i] ?? '' })),
      ),
      h(
        'td',
        {},
        h(
          'button',
          {
            type: 'button',
            className: 'secondary',
            'aria-label': `Remove row ${number} of ${name}`,
            onclick: () => row.remove(),
          },
          'Remove',
        ),
      ),
    );
    body.append(row);
  };
  defaults.forEach((values) => addRow(values));
  return h(
    'fieldset',
    { 'data-grid': name },
    h('legend', {}, legend),
    h(
      'table',
      {},
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          columns.map((column) => h('th', { scope: 'col' }, column)),
          h('th', { scope: 'col' }, 'Row'),
        ),
      ),
      body,
    ),
    h('button', { type: 'button', className: 'secondary', onclick: () => addRow() }, `Add a row to ${name}`),
  );
}

/** The rows a grid editor holds, each cell as typed (a row left wholly empty is no row). */
function gridRows(editor) {
  return [...editor.querySelectorAll('tbody tr')]
    .map((row) => [...row.querySelectorAll('input')].map((input) => input.value))
    .filter((row) => row.some((cell) => cell !== ''));
}

async function startView(projectId, environmentName, pipelineName, query) {
  const list = await projects();
  projectId ??= list[0]?.id;
  if (!projectId) return show('Start a run', h('p', {}, 'No project yet.'));
  const environments = await allPages(`/projects/${projectId}/environments`);
  environmentName ??= environments[0]?.name;
  const published = environmentName
    ? (await api('GET', `/projects/${projectId}/published-pipelines?environmentName=${enc(environmentName)}&size=100`)).results
    : [];
  const runnable = published.filter((p) => p.name.endsWith('.orch.yaml'));
  pipelineName ??= runnable[0]?.name;
  const versions = environmentName
    ? (await api('GET', `/projects/${projectId}/artifacts?environmentName=${enc(environmentName)}&size=100`)).results.filter(
        (v) => v.enabled,
      )
    : [];
  const previous = query.get('again')
    ? await api('GET', `/projects/${projectId}/pipeline-executions/${query.get('again')}`).catch(() => null)
    : null;
  const projectVariables = await allPages(`/projects/${projectId}/variables`);
  let fileVariables = {};
  if (pipelineName) {
    try {
      fileVariables = (await pipelineFile(projectId, environmentName, pipelineName)).document?.pipeline?.variables ?? {};
    } catch {
      fileVariables = {};
    }
  }
  const variables = new Map();
  for (const v of projectVariables) variables.set(v.name, { type: v.type, value: v.value, from: 'project' });
  for (const [name, v] of Object.entries(fileVariables)) {
    if (!variables.has(name)) {
      const columns = v?.metadata?.columns && typeof v.metadata.columns === 'object' ? Object.keys(v.metadata.columns) : [];
      variables.set(name, { type: v?.metadata?.type ?? 'TEXT', value: v?.defaultValue, columns, from: 'pipeline' });
    }
  }
  const again = previous?.scalarVariables ?? {};
  const projectSelect = select(
    'projectId',
    list.map((p) => [p.id, p.name]),
    projectId,
  );
  const envSelect = select(
    'environmentName',
    environments.map((e) => [e.name, e.name]),
    environmentName,
  );
  const pipelineSelect = select(
    'pipelineName',
    runnable.map((p) => [p.name, p.name]),
    pipelineName,
  );
  const reload = () =>
    (location.hash = `#/start/${projectSelect.value}/${enc(projectSelect.value === projectId ? envSelect.value : '')}/${enc(
      projectSelect.value === projectId && envSelect.value === environmentName ? pipelineSelect.value : '',
    )}`);
  for (const control of [projectSelect, envSelect, pipelineSelect]) control.addEventListener('change', reload);
  const versionSelect = select(
    'versionName',
    [['', 'latest enabled'], ...versions.map((v) => [v.versionName, v.versionName])],
    previous?.versionName ?? '',
  );
  const inputs = [...variables].map(([name, v]) => {
    if (v.type === 'GRID') return gridEditor(name, v, `${name} (GRID, ${v.from})`);
    const initial = again[name] ?? v.value ?? '';
    const control = h('input', {
      name: `var:${name}`,
      'data-type': v.type,
      type: v.type === 'NUMBER' ? 'number' : 'text',
      step: 'any',
      value: initial,
    });
    return field(`${name} (${v.type}, ${v.from})`, control);
  });
  const problem = h('div');
  const form = h(
    'form',
    { className: 'stack', 'aria-label': 'Start a run' },
    field('Project', projectSelect),
    field('Environment', envSelect),
    field('Pipeline', pipelineSelect),
    field('Version', versionSelect),
    inputs.length ? h('fieldset', {}, h('legend', {}, 'Variables'), inputs) : h('p', { className: 'muted' }, 'No variables.'),
    h('button', { type: 'submit', disabled: !pipelineName || !canWrite() }, 'Start run'),
    problem,
  );
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const scalarVariables = {};
    const gridVariables = {};
    try {
      for (const control of form.querySelectorAll('input[data-type]')) {
        const name = control.name.slice(4);
        const original = variables.get(name).value;
        const typed = control.value;
        if (typed !== '' && String(original ?? '') !== typed) {
          scalarVariables[name] = control.dataset.type === 'NUMBER' ? Number(typed) : typed;
        }
      }
      for (const editor of form.querySelectorAll('fieldset[data-grid]')) {
        const name = editor.dataset.grid;
        const rows = gridRows(editor);
        if (JSON.stringify(rows) !== JSON.stringify(variables.get(name).value ?? [])) gridVariables[name] = rows;
      }
      const body = { pipelineName: pipelineSelect.value, environmentName: envSelect.value, scalarVariables, gridVariables };
      if (versionSelect.value) body.versionName = versionSelect.value;
      const { pipelineExecutionId } = await api('POST', `/projects/${projectId}/pipeline-executions`, body);
      say('Run started');
      location.hash = `#/runs/${projectId}/${pipelineExecutionId}`;
    } catch (error) {
      problem.replaceChildren(errorBox(error));
    }
  });
  show('Start a run', form);
}

async function agentsView() {
  const body = h('div');
  show('Agents', body);
  stopView = live(
    async () => {
      const agents = await api('GET', '/agents?size=100');
      body.replaceChildren(
        table(
          ['Agent', 'Type', 'Status', 'Connected', 'Last contact'],
          agents.results.map((a) => [
            a.name,
            a.agentType,
            badge(a.agentStatus ?? a.status),
            a.connected ? 'connected' : 'not connected',
            when(a.lastContactAt) || 'never',
          ]),
        ),
      );
    },
    { type: 'agent.*' },
  );
}

async function perProject(title, query, render) {
  const list = await projects();
  const projectId = query.get('projectId') || list[0]?.id;
  const chooser = select(
    'projectId',
    list.map((p) => [p.id, p.name]),
    projectId,
  );
  chooser.addEventListener('change', () => (location.hash = `${location.hash.split('?')[0]}?projectId=${chooser.value}`));
  const body = h('div');
  show(title, h('div', { className: 'filters' }, field('Project', chooser)), body);
  if (projectId) await render(projectId, body);
}

function schedulesView(query) {
  return perProject('Schedules', query, async (projectId, body) => {
    stopView = poll(async () => {
      const page = await api('GET', `/projects/${projectId}/schedules?size=100`);
      const details = await Promise.all(page.results.map((s) => api('GET', `/projects/${projectId}/schedules/${s.scheduleId}`)));
      body.replaceChildren(
        table(
          ['Schedule', 'Pipeline', 'Environment', 'Cron', 'Next run', 'Enabled'],
          details.map((s) => [
            s.name,
            s.pipelineName,
            s.environmentName,
            `${s.cronExpression} (${s.timezone})`,
            s.scheduleEnabled ? when(s.nextRunAt) : '—',
            canWrite()
              ? actionButton(
                  s.scheduleEnabled ? 'Disable' : 'Enable',
                  async () => {
                    await api('PATCH', `/projects/${projectId}/schedules/${s.scheduleId}`, {
                      scheduleEnabled: !s.scheduleEnabled,
                    });
                    say(`Schedule ${s.name} ${s.scheduleEnabled ? 'disabled' : 'enabled'}`);
                    route();
                  },
                  { className: 'secondary', 'aria-label': `${s.scheduleEnabled ? 'Disable' : 'Enable'} ${s.name}` },
                )
              : s.scheduleEnabled
                ? 'yes'
                : 'no',
          ]),
        ),
      );
      return false; // schedules change only by writes: read once
    });
  });
}

function streamingView(query) {
  return perProject('Streaming pipelines', query, async (projectId, body) => {
    // The list, then each pipeline's status (state, position, lag, rows per table) in turn: one read a tick,
    // every 2 s (lag changes without an event), so a view of N pipelines refreshes each every 2(N + 1) s.
    let pipelines = [];
    const statuses = new Map();
    let turn = 0;
    const render = () =>
      body.replaceChildren(
        table(
          ['Pipeline', 'Source', 'Target', 'State', 'Since', 'Position', 'Lag', 'Rows'],
          pipelines.map((p) => {
            const status = statuses.get(p.streamingPipelineId) ?? {};
            const rows = Object.values(status.rowsPerTable ?? {}).reduce((sum, n) => sum + n, 0);
            return [
              p.name,
              p.streamingSource?.type ?? '',
              p.streamingTarget?.type ?? '',
              h(
                'span',
                {},
                badge(status.status ?? p.status ?? 'UNKNOWN'),
                status.message ? h('div', { className: 'muted' }, status.message) : '',
              ),
              when(status.changedAt),
              status.position ?? '—',
              status.lagSeconds !== undefined ? `${status.lagSeconds} s` : 'not reported',
              status.rowsPerTable ? String(rows) : '—',
            ];
          }),
        ),
      );
    stopView = poll(async () => {
      const at = turn++ % (pipelines.length + 1);
      if (at === 0) pipelines = (await api('GET', `/projects/${projectId}/streaming-pipelines?size=100`)).results;
      else {
        const p = pipelines[at - 1];
        statuses.set(
          p.streamingPipelineId,
          await api('GET', `/projects/${projectId}/streaming-pipelines/${p.streamingPipelineId}/status`),
        );
      }
      render();
    });
  });
}

async function aiView(taskId) {
  const open = h('input', { name: 'taskId', value: taskId ?? '' });
  const chooser = h(
    'form',
    { className: 'filters', 'aria-label': 'Open a task' },
    field('Task ID', open),
    h('button', { type: 'submit' }, 'Open'),
  );
  chooser.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = `#/ai/${open.value.trim()}`;
  });
  const body = h('div');
  show('AI tasks', chooser, body);
  if (!taskId)
    return body.append(
      h('p', { className: 'muted' }, 'Tasks are created through the API (POST /v1/ai/agents/tasks); open one by its ID.'),
    );
  stopView = poll(async () => {
    const task = await api('GET', `/ai/agents/tasks/${taskId}`);
    const messages = await api('GET', `/ai/agents/tasks/${taskId}/messages?limit=1000`);
    const pending = task.pendingPermission;
    body.replaceChildren(
      h('p', {}, badge(task.status), ` ${task.agentConfig?.name ?? ''}`),
      h(
        'div',
        { className: 'chat', role: 'log', 'aria-label': 'Conversation' },
        messages.results.map((m) => {
          const data = m.data ?? {};
          const text = data.text ?? data.content ?? data.message ?? data.error ?? JSON.stringify(data);
          return h(
            'div',
            { className: `msg ${data.type === 'USER_MESSAGE' ? 'user' : ''}` },
            h('strong', {}, `${data.type ?? 'message'} `),
            h('span', { className: 'muted' }, when(m.timestamp)),
            h('div', {}, String(text)),
          );
        }),
      ),
      pending && canWrite()
        ? h(
            'div',
            { className: 'card', role: 'group', 'aria-label': 'Permission' },
            h('p', {}, `The agent asks to use ${pending.toolName} (${pending.access}).`),
            h('pre', {}, JSON.stringify(pending.arguments, null, 2)),
            h(
              'div',
              { className: 'actions' },
              actionButton('Allow', () =>
                api('POST', `/ai/agents/tasks/${taskId}/permissions`, { toolName: pending.toolName, granted: true }),
              ),
              actionButton(
                'Refuse',
                () => api('POST', `/ai/agents/tasks/${taskId}/permissions`, { toolName: pending.toolName, granted: false }),
                { className: 'danger' },
              ),
            ),
          )
        : '',
    );
    return task.status === 'RUNNING' || task.status === 'PENDING';
  });
}

// ---- routing -----------------------------------------------------------------------------------------

function renderWho() {
  const who = document.getElementById('who');
  const session = current();
  document.getElementById('nav').hidden = !session;
  if (!session) return who.replaceChildren();
  who.replaceChildren(
    h('span', {}, `${session.role}`),
    h(
      'button',
      {
        type: 'button',
        className: 'secondary',
        onclick: () => (signOut(), (projectsCache = null), (location.hash = '#/signin'), route()),
      },
      'Sign out',
    ),
  );
}

async function route() {
  stopView();
  stopView = () => {};
  renderWho();
  const [pathPart, queryPart] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = pathPart.split('/').map(decodeURIComponent);
  const query = new URLSearchParams(queryPart ?? '');
  for (const link of document.querySelectorAll('#nav a')) {
    link.toggleAttribute('aria-current', link.getAttribute('href') === `#/${parts[0]}`);
    if (link.hasAttribute('aria-current')) link.setAttribute('aria-current', 'page');
  }
  if (!current()) return signInView();
  try {
    switch (parts[0]) {
      case 'projects':
        return parts[1] ? await projectView(parts[1]) : await projectsView();
      case 'pipeline':
        return await pipelineView(parts[1], parts[2], parts.slice(3).join('/'));
      case 'runs':
        return parts[1] ? await runView(parts[1], parts[2]) : await runsView(query);
      case 'start':
        return await startView(parts[1] || undefined, parts[2] || undefined, parts.slice(3).join('/') || undefined, query);
      case 'agents':
        return await agentsView();
      case 'schedules':
        return await schedulesView(query);
      case 'streaming':
        return await streamingView(query);
      case 'ai':
        return await aiView(parts[1]);
      default:
        location.hash = '#/runs';
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      signOut();
      return signInView();
    }
    show('Something went wrong', errorBox(error));
  }
}

window.addEventListener('hashchange', route);
route().then(() => main.focus());
