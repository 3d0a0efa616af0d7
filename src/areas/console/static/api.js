// The console's only way to the server: the public API under /dpc/v1, with a bearer token got from the
// server's own token endpoint. Credentials and token live in this module's memory only (no storage, no
// cookie): a reload or "Sign out" forgets them, and no cookie means no cross-site request can use them.

let session = null; // { clientId, clientSecret, token, expiresAt, role, accountId }

/** The claims of a JWT, read (not verified: the server verifies every request). */
function claimsOf(token) {
  const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
  return JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4)));
}

async function fetchToken(clientId, clientSecret) {
  // credentials: 'omit' everywhere: no cookie is sent, and a 401 with WWW-Authenticate: Basic (the token
  // endpoint's answer to a wrong secret) comes back to the page instead of opening the browser's login prompt.
  const answer = await fetch('/oauth/dpc/token', {
    method: 'POST',
    credentials: 'omit',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: clientId, client_secret: clientSecret }),
  });
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new ApiError(answer.status, body.error_description || body.detail || 'Sign-in failed.', body);
  const claims = claimsOf(body.access_token);
  return {
    clientId,
    clientSecret,
    token: body.access_token,
    expiresAt: Date.now() + body.expires_in * 1000,
    role: claims.role,
    accountId: claims.account_id,
  };
}

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export async function signIn(clientId, clientSecret) {
  session = await fetchToken(clientId, clientSecret);
  etags.clear();
  return session;
}

/**
 * Signs in with an access token got elsewhere (`POST /oauth/dpc/token`): kept in memory as credentials are,
 * tried once; it cannot be renewed, so when it expires the page asks to sign in again.
 */
export async function signInWithToken(token) {
  let claims;
  try {
    claims = claimsOf(token);
  } catch {
    throw new ApiError(400, 'That is not an access token.');
  }
  if (typeof claims.exp !== 'number' || claims.exp * 1000 <= Date.now()) throw new ApiError(401, 'The access token has expired.');
  session = { token, expiresAt: claims.exp * 1000, role: claims.role, accountId: claims.account_id };
  etags.clear();
  try {
    await api('GET', '/projects?size=1');
  } catch (error) {
    session = null;
    throw error;
  }
  return session;
}

export function signOut() {
  session = null;
  etags.clear();
}

export const current = () => session;
/** Whether the signed-in role may write project resources (developer, admin). Viewers are shown no write button. */
export const canWrite = () => session !== null && session.role !== 'viewer';

/** Last answer of each GET, with its ETag: a GET sent again carries If-None-Match and a 304 reuses the body. */
const etags = new Map();

/** Calls `/dpc/v1{path}`; answers the parsed body, throws ApiError with the problem's detail otherwise. */
export async function api(method, path, body) {
  if (!session) throw new ApiError(401, 'Not signed in.');
  await renew();
  const headers = { authorization: `Bearer ${session.token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const kept = method === 'GET' ? etags.get(path) : undefined;
  if (kept) headers['if-none-match'] = kept.etag;
  const answer = await fetch(`/dpc/v1${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
  });
  if (answer.status === 304 && kept) return kept.body;
  const text = await answer.text();
  const type = answer.headers.get('content-type') || '';
  const parsed = text && type.includes('json') ? JSON.parse(text) : text;
  if (!answer.ok) {
    const problem = typeof parsed === 'object' ? parsed : {};
    const violations = Array.isArray(problem.violations) ? ` (${problem.violations.join('; ')})` : '';
    throw new ApiError(answer.status, `${answer.status} ${problem.title || ''}: ${problem.detail || text}${violations}`, parsed);
  }
  const etag = answer.headers.get('etag');
  if (method === 'GET' && etag) etags.set(path, { etag, body: parsed });
  return parsed;
}

/**
 * The first `max` items of a page-numbered list (`page`, `size`, `total`), and `total`: how many the list
 * holds, so that a page showing them can say what it left out.
 */
export async function firstItems(path, max = 1000) {
  const results = [];
  let total = 0;
  const join = path.includes('?') ? '&' : '?';
  for (let page = 0; results.length < max; page += 1) {
    const answer = await api('GET', `${path}${join}page=${page}&size=100`);
    results.push(...answer.results);
    total = answer.total;
    if (answer.results.length === 0 || results.length >= answer.total) break;
  }
  const kept = results.slice(0, max);
  return { results: kept, total: Math.max(total, kept.length) };
}

/** Every item of a page-numbered list, up to `max` items. */
export async function allPages(path, max = 1000) {
  return (await firstItems(path, max)).results;
}

export const POLL_MS = 2000;

/** A valid token (renewed a minute before it expires), for the requests `api` does not make. */
async function bearer() {
  if (!session) throw new ApiError(401, 'Not signed in.');
  await renew();
  return `Bearer ${session.token}`;
}

/** A minute before the token expires: a new one with the kept credentials; a token given by hand cannot be renewed. */
async function renew() {
  if (Date.now() <= session.expiresAt - 60_000) return;
  if (session.clientSecret !== undefined) session = await fetchToken(session.clientId, session.clientSecret);
  else if (Date.now() >= session.expiresAt) throw new ApiError(401, 'The access token has expired: sign in again.');
}

/**
 * Follows the server's event stream (`/v1/events/stream`, Server-Sent Events) with the bearer token (which
 * `EventSource` cannot send): calls `onEvent` with each event, `onOpen` once the stream answered, and
 * resolves when the stream ends (the server shut down or the signal aborted). Rejects when it cannot be
 * followed (a refusal, no streaming body).
 */
async function follow(query, { onOpen, onEvent }, signal) {
  const answer = await fetch(`/dpc/v1/events/stream?${new URLSearchParams(query)}`, {
    headers: { authorization: await bearer(), accept: 'text/event-stream' },
    cache: 'no-store',
    credentials: 'omit',
    signal,
  });
  if (!answer.ok || !answer.body) throw new ApiError(answer.status, `The event stream answered ${answer.status}.`);
  onOpen();
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) onEvent(JSON.parse(data));
    }
  }
}

/**
 * Keeps a view current. `tick(events)` reads what the view shows; it runs now, then again when the event
 * stream announces an event the view follows (`feed`: the stream's `type`/`projectId` query, and `matches`
 * to keep only the events of this view), with the events since the last tick. Where the stream cannot be
 * followed, it runs every 2 s instead (ETags make unchanged answers 304). Either way: never two ticks at
 * once, never two within 2 s, and nothing at all while the page is hidden (one tick catches up when it shows
 * again). `tick` answering false ends it, as does the returned stop(); answering 'more' asks for another tick (2 s
 * later) though no event came.
 */
export function live(tick, feed) {
  let stopped = false;
  let busy = false;
  let wanted = false;
  let lastAt = 0;
  let timer;
  let stream; // the AbortController of the open stream
  let streaming = false; // whether the stream answered (else: polling)
  let events = [];

  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    stream?.abort();
    document.removeEventListener('visibilitychange', onVisibility);
  };
  const run = async () => {
    timer = undefined;
    if (stopped || document.hidden) return;
    busy = true;
    wanted = false;
    lastAt = Date.now();
    const seen = events;
    events = [];
    let answer;
    try {
      answer = await tick(seen);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 401 || error.status === 404)) answer = false;
    }
    busy = false;
    if (answer === false) return stop();
    if (wanted || !streaming || answer === 'more') request();
  };
  /** A tick as soon as the rules allow: after the one running, and 2 s after the last began. */
  const request = () => {
    wanted = true;
    if (stopped || busy || timer !== undefined || document.hidden) return;
    timer = setTimeout(run, Math.max(0, lastAt + POLL_MS - Date.now()));
  };
  const open = () => {
    if (!feed || stopped || document.hidden || typeof TextDecoderStream === 'undefined') return;
    stream = new AbortController();
    const mine = stream;
    follow(
      { ...(feed.type && { type: feed.type }), ...(feed.projectId && { projectId: feed.projectId }) },
      {
        // Changes made before the stream opened are caught by one more read.
        onOpen: () => ((streaming = true), request()),
        onEvent: (event) => {
          if (feed.matches && !feed.matches(event)) return;
          events.push(event);
          request();
        },
      },
      mine.signal,
    )
      .then(() => {
        // The server ended the stream (a restart): read again, and follow it again 2 s later.
        if (mine.signal.aborted || stopped) return;
        streaming = false;
        request();
        setTimeout(open, POLL_MS);
      })
      .catch(() => {
        if (mine.signal.aborted || stopped) return;
        streaming = false; // cannot follow it: poll every 2 s
        request();
      });
  };
  const onVisibility = () => {
    if (document.hidden) {
      clearTimeout(timer);
      timer = undefined;
      stream?.abort();
      streaming = false;
    } else {
      request();
      open();
    }
  };
  document.addEventListener('visibilitychange', onVisibility);
  run();
  open();
  return stop;
}

/** Like `live` without an event stream: every 2 s after the previous tick, and nothing while the page is hidden. */
export function poll(tick) {
  return live(tick, undefined);
}
