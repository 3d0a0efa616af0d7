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
  if (Date.now() > session.expiresAt - 60_000) session = await fetchToken(session.clientId, session.clientSecret);
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

/** Every item of a page-numbered list (`page`, `size`, `total`), up to `max` items. */
export async function allPages(path, max = 1000) {
  const results = [];
  const join = path.includes('?') ? '&' : '?';
  for (let page = 0; results.length < max; page += 1) {
    const answer = await api('GET', `${path}${join}page=${page}&size=100`);
    results.push(...answer.results);
    if (answer.results.length === 0 || results.length >= answer.total) break;
  }
  return results;
}

export const POLL_MS = 2000;

/**
 * Runs `tick` now and then every 2 s after the previous tick ends (so never more than one request round a
 * view per 2 s, and never two at once), until `stop()` or the tick answers false. Ticks reuse ETags.
 */
export function poll(tick) {
  let stopped = false;
  let timer;
  const run = async () => {
    if (stopped) return;
    let again = true;
    try {
      again = (await tick()) !== false;
    } catch (error) {
      again = !(error instanceof ApiError && (error.status === 401 || error.status === 404));
    }
    if (again && !stopped) timer = setTimeout(run, POLL_MS);
  };
  run();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
