import { badRequest } from './problems.ts';

/**
 * One credential detector for every place that stores user text meant to hold no secret (streaming
 * definitions, connector profiles, clone URLs, OAuth endpoint URLs...). It looks at names (a property,
 * header or query parameter called `password`, `X-Auth-Token`, `key`, `sig`...) and at values, as
 * written and percent-decoded: URLs with userinfo, `name=value` pairs and `"name": "value"` members
 * whose name is a credential's (connection strings, query strings, JSON bodies), authorization scheme
 * values (`Bearer ...`, `Basic ...`) and a few token formats that announce themselves (private key
 * blocks, GitHub, GitLab, Slack and `sk-` keys). What it finds is answered as a reason that never
 * quotes the value. docs/credentials.md has the rules. Every pattern is bounded or anchored so that a
 * scan stays linear in the length of the text.
 */

/** Names that are credentials when the whole (letters and digits only, lower case) name ends with them. */
const CREDENTIAL_ENDINGS = [
  'password',
  'passwd',
  'passphrase',
  'passcode',
  'pwd',
  'secret',
  'apikey',
  'accesskey',
  'secretkey',
  'privatekey',
  'accountkey',
  'subscriptionkey',
  'sharedaccesskey',
  'masterkey',
  'functionskey',
  'signingkey',
  'encryptionkey',
  'credential',
  'credentials',
  'authorization',
  'cookie',
  'signature',
  'userinfo',
  'jwt',
];
/** `...token` is a credential (`access_token`, `X-Auth-Token`) but for these paging and sync tokens. */
const NOT_CREDENTIAL_TOKENS = ['pagetoken', 'nexttoken', 'continuationtoken', 'paginationtoken', 'synctoken', 'cursortoken'];
/** Whole names that are credentials on their own. */
const CREDENTIAL_NAMES = new Set(['key', 'sig', 'appid', 'auth', 'pass', 'sas']);
/** Words that make a trailing `key` a credential's name although `key` alone is ambiguous (`primary.key` is not). */
const KEY_QUALIFIERS = new Set([
  'api',
  'access',
  'secret',
  'private',
  'account',
  'subscription',
  'shared',
  'master',
  'client',
  'auth',
  'app',
  'application',
  'signing',
  'storage',
  'functions',
]);

function wordsOf(name: string): string[] {
  return name
    .normalize('NFKC')
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter(Boolean);
}

/** Whether a property, header, query parameter or member called `name` holds a credential. */
export function isCredentialName(name: string): boolean {
  const words = wordsOf(name);
  if (words.length === 0) return false;
  const joined = words.join('');
  if (CREDENTIAL_NAMES.has(joined)) return true;
  if (CREDENTIAL_ENDINGS.some((ending) => joined.endsWith(ending))) return true;
  if (joined.endsWith('token') && !NOT_CREDENTIAL_TOKENS.some((ending) => joined.endsWith(ending))) return true;
  const last = words.at(-1)!;
  // Last words (after splitting on punctuation and camelCase): `db.pass`, `url_sig`, `storage-account-key`.
  if (last === 'pass' || last === 'sig') return true;
  return last === 'key' && words.length > 1 && KEY_QUALIFIERS.has(words.at(-2)!);
}

/**
 * A value that stands for no credential: nothing, a flag, masking stars, or a placeholder filled in
 * elsewhere (`${token}`, `{{key}}`, `{key}`, `<key>`), also after an authorization scheme (`Bearer {{token}}`).
 */
function isHarmlessValue(value: string): boolean {
  const trimmed = value.trim();
  return (
    trimmed === '' ||
    /^(true|false|null|none|yes|no)$/i.test(trimmed) ||
    /^([A-Za-z][\w-]*\s+)?(\$\{[^{}]*\}|\{\{[^{}]*\}\}|\{[^{}]*\}|<[^<>]*>|\*+)$/.test(trimmed)
  );
}

/** `value` percent-decoded (up to three rounds, for `%2570`), each round as a variant; bad escapes stay as written. */
function variantsOf(value: string): string[] {
  const variants = [value.normalize('NFKC')];
  let current = value;
  for (let round = 0; round < 3 && /%[0-9a-f]{2}/i.test(current); round += 1) {
    current = current.replace(/(%[0-9a-f]{2})+/gi, (run) => {
      try {
        return decodeURIComponent(run);
      } catch {
        return run.replace(/%([0-9a-f]{2})/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
      }
    });
    variants.push(current.normalize('NFKC'));
  }
  return variants;
}

/** `scheme://user@host` or `scheme://user:password@host`: userinfo in a URL. */
const URL_USERINFO = /(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}:\/\/[^\s/?#@]{1,512}@/i;
/** `user:password@host` without a scheme (a host field written so). */
const BARE_USERINFO = /(?:^|[\s=;,(])[^\s/?#@:;,=(]{1,256}:[^\s/?#@;,=]{1,512}@[a-z0-9[]/i;
/** `name=` or `name:`, the name optionally quoted; pairValue() reads the value after it. */
const PAIR = /(?:^|[^\w.-])["']?([A-Za-z_][\w.-]{0,127})["']?\s*([:=])/g;
/** The value after a pair's separator: quoted, or up to a separator (its first 1024 characters tell a placeholder from a credential). */
const PAIR_VALUE = /^\s{0,16}(?:"([^"]{0,1024})|'([^']{0,1024})|([^\s"'&;,}\]]{0,1024}))/;

/** The value of the pair whose separator ends at `end`; only looked at, so pairs inside it (`https://h/?token=...`) are found too. */
function pairValue(text: string, end: number): string {
  const match = PAIR_VALUE.exec(text.slice(end, end + 1100))!;
  return match[1] ?? match[2] ?? match[3] ?? '';
}
/** An authorization header value: a scheme and a token. */
const AUTH_SCHEME =
  /(?:^|[\s"'=:,])(bearer|basic|token|digest|negotiate|ntlm|sharedkey|sharedaccesssignature|aws4-hmac-sha256|apikey)\s+([^\s"',]{8,})/gi;
/** Credentials whose format names them. */
const TOKEN_FORMATS: Array<[RegExp, string]> = [
  [/-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----/, 'a private key'],
  [/\b(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}/, 'a GitHub token'],
  [/\bglpat-[A-Za-z0-9_-]{20,}/, 'a GitLab token'],
  [/\bxox[abposr]-[A-Za-z0-9-]{10,}/, 'a Slack token'],
  [/\bsk-[A-Za-z0-9_-]{20,}/, 'an API secret key'],
  [/\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/, 'a JSON Web Token'],
  [/\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/, 'an AWS access key id'],
];

/** A token shaped like a credential rather than a word: a digit, a symbol or a capital past its first letter. */
function looksLikeToken(token: string): boolean {
  return /[0-9._~+/=_-]/.test(token) || /[A-Z]/.test(token.slice(1));
}

/** A credential that announces itself: in a URL's userinfo, in a token format, after an authorization scheme. */
function selfEvidentCredential(value: string): string | undefined {
  if (URL_USERINFO.test(value)) return 'a URL with a user name or password in it';
  if (BARE_USERINFO.test(value)) return 'a user name and password before a host';
  for (const [pattern, what] of TOKEN_FORMATS) if (pattern.test(value)) return what;
  for (const match of value.matchAll(AUTH_SCHEME)) {
    if (looksLikeToken(match[2]) && !isHarmlessValue(match[2])) return `an authorization value (${match[1]} scheme)`;
  }
  return undefined;
}

/** A `name=value` or `name: value` pair whose name is a credential's (with `tokenLike`, only a value shaped like a token). */
function credentialPair(value: string, tokenLike = false): string | undefined {
  for (const match of value.matchAll(PAIR)) {
    const [whole, name, separator] = match;
    if (!isCredentialName(name)) continue;
    const written = pairValue(value, match.index + whole.length);
    // `scheme:` of a URL or `jdbc:postgresql:` is no pair.
    if (separator === ':' && written.startsWith('/')) continue;
    if (!isHarmlessValue(written) && (!tokenLike || looksLikeToken(written))) return `a value for "${name}"`;
  }
  return undefined;
}

function credentialInVariant(value: string): string | undefined {
  return selfEvidentCredential(value) ?? credentialPair(value);
}

/** A string literal of SQL (`'...'`, a doubled quote inside), at most 64 KB each: where a connection string would be. */
const SQL_STRING = /'((?:[^']|''){0,65536})'/g;

/**
 * Why SQL text carries a credential, or undefined. In SQL a `name = value` is mostly a predicate (`WHERE key =
 * 'region'`, `token = 'abc-123'`), not a credential written down: pairs are looked for only inside string
 * literals (a connection string: `'host=db password=S3cret!'`), and there only with a value shaped like a
 * token (`'auth=failed'` is a word). Credentials that announce themselves (a URL's userinfo, a private key, a
 * JWT, an AWS key id, `Bearer …`) are found anywhere in the text.
 */
export function credentialInSql(sql: string): string | undefined {
  const text = sql.normalize('NFKC');
  const evident = selfEvidentCredential(text);
  if (evident) return evident;
  for (const match of text.matchAll(SQL_STRING)) {
    const found = credentialPair(match[1].replaceAll("''", "'"), true);
    if (found) return found;
  }
  return undefined;
}

/** Why `value` carries a credential, as a phrase that never quotes it; undefined when it carries none. */
export function credentialIn(value: string): string | undefined {
  for (const variant of variantsOf(value)) {
    const found = credentialInVariant(variant);
    if (found) return found;
  }
  return undefined;
}

/** Why the value `value` of something called `name` is a credential; undefined when it is none. */
export function credentialInNamed(name: string, value: string): string | undefined {
  if (isCredentialName(name) && !isHarmlessValue(value)) return `"${name}" names a credential`;
  return credentialIn(value);
}

export interface ScanOptions {
  /** Objects not looked into (secret references: their fields name where a secret is, which is allowed). */
  skip?: ReadonlySet<unknown>;
}

/**
 * The violations of a JSON value, `field` naming it: every string carrying a credential, and every
 * member named like a credential with a string value (an object there, such as a secret reference, is
 * looked into instead). `hint` says where the credential belongs instead.
 */
export function credentialViolations(value: unknown, field: string, hint: string, options: ScanOptions = {}): string[] {
  const violations: string[] = [];
  const walk = (node: unknown, at: string, name: string | undefined) => {
    if (options.skip?.has(node)) return;
    if (typeof node === 'string') {
      const found = name === undefined ? credentialIn(node) : credentialInNamed(name, node);
      if (found) violations.push(`${at}: holds a credential (${found}); ${hint}`);
    } else if (Array.isArray(node)) {
      node.forEach((item, index) => walk(item, `${at}.${index}`, undefined));
    } else if (node !== null && typeof node === 'object') {
      for (const [key, item] of Object.entries(node)) walk(item, `${at}.${key}`, key);
    }
  };
  walk(value, field, undefined);
  return violations;
}

/** One violation for a value with a name (a header, a query parameter), or none. */
export function namedCredentialViolation(name: string, value: string | undefined, field: string, hint: string): string[] {
  if (value === undefined) return [];
  const found = credentialInNamed(name, value);
  return found ? [`${field}: holds a credential (${found}); ${hint}`] : [];
}

/** Throws the 400 for `violations`, if any: they name the fields, never the values. */
export function refuseCredentials(violations: string[], detail: string): void {
  if (violations.length > 0) throw badRequest(detail, violations);
}
