import { readFileSync } from 'node:fs';
import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { rootCertificates } from 'node:tls';
import type { Config } from './config.ts';
import { ProblemError } from './problems.ts';

/**
 * Addresses that are not the public internet: the server's own host and the networks around it.
 * Outbound requests never reach them unless the deployment allows a range (DPC_OUTBOUND_ALLOW), so a
 * URL given by a caller cannot be used to probe the server's network. IPv4-mapped IPv6 addresses
 * (::ffff:a.b.c.d) are matched against the IPv4 ranges by BlockList itself.
 */
const NON_PUBLIC = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], // "this" network
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata services
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  NON_PUBLIC.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 96], // unspecified, loopback, IPv4-compatible
  ['64:ff9b::', 96], // NAT64: embeds an IPv4 address
  ['100::', 64], // discard
  ['2001::', 32], // Teredo: embeds an IPv4 address
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4: embeds an IPv4 address
  ['fc00::', 7], // unique local (private)
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
] as const) {
  NON_PUBLIC.addSubnet(network, prefix, 'ipv6');
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);
/** Headers that carry the caller's credentials: never sent on to another origin by a redirect. */
const ALWAYS_CREDENTIAL_HEADERS = ['authorization', 'proxy-authorization', 'cookie'];

export type OutboundFailure = 'refused' | 'invalid' | 'unreachable' | 'timeout';
const FAILURE_STATUS: Record<OutboundFailure, number> = { refused: 422, invalid: 400, unreachable: 502, timeout: 504 };

/** Why an outbound request did not get an answer; a problem the API can answer as it is. */
export class OutboundError extends ProblemError {
  readonly failure: OutboundFailure;
  constructor(failure: OutboundFailure, detail: string) {
    super(FAILURE_STATUS[failure], detail, failure === 'refused' ? { name: 'destination-not-allowed' } : {});
    this.failure = failure;
  }
}

export interface OutboundSettings {
  allowedRanges: string[];
  timeoutMs: number;
  maxResponseBytes: number;
  maxRedirects: number;
  caFile?: string;
}

export interface OutboundRequest {
  method: string;
  url: URL;
  headers: Record<string, string>;
  body?: string;
  /** Further headers that carry credentials (an API key header): dropped when a redirect leaves the origin. */
  credentialHeaders?: string[];
}

export interface OutboundResponse {
  status: number;
  headers: Record<string, string>;
  /** At most maxResponseBytes of the body. */
  body: Buffer;
  /** Whether the body was cut off at maxResponseBytes. */
  truncated: boolean;
}

export function outboundSettings(config: Config): OutboundSettings {
  return {
    allowedRanges: config.outboundAllowedRanges,
    timeoutMs: config.outboundTimeoutMs,
    maxResponseBytes: config.outboundMaxResponseBytes,
    maxRedirects: config.outboundMaxRedirects,
    caFile: config.outboundCaFile,
  };
}

function familyOf(address: string): 'ipv4' | 'ipv6' {
  return isIP(address) === 6 ? 'ipv6' : 'ipv4';
}

function refusal(host: string, address: string): OutboundError {
  const via = host === address ? '' : ` (${host} resolves to it)`;
  return new OutboundError(
    'refused',
    `${address}${via} is a loopback, private or reserved address, which outbound requests may not reach unless the deployment allows its range.`,
  );
}

/**
 * HTTP(S) requests to addresses callers give, within the deployment's rules: only http and https,
 * only allowed addresses (checked on every DNS answer and every redirect, and the connection goes to
 * the address that was checked), a deadline for the whole exchange, and a bounded response body.
 */
export class OutboundClient {
  private readonly allowed = new BlockList();
  private readonly ca: string[] | undefined;

  constructor(private readonly settings: OutboundSettings) {
    for (const range of settings.allowedRanges) {
      const [network, prefix] = range.split('/');
      const family = familyOf(network);
      this.allowed.addSubnet(network, prefix === undefined ? (family === 'ipv6' ? 128 : 32) : Number(prefix), family);
    }
    this.ca = settings.caFile ? [...rootCertificates, readFileSync(settings.caFile, 'utf8')] : undefined;
  }

  /** Whether an address may be reached: it is public, or in a range the deployment allows. */
  allows(address: string): boolean {
    const family = familyOf(address);
    return this.allowed.check(address, family) || !NON_PUBLIC.check(address, family);
  }

  /**
   * Refuses (OutboundError) a URL whose host is, or resolves to, an address this server may not reach. For
   * connections other programs make (git): the check and their own lookup are apart, so DNS answers that
   * change in between are not caught; send() checks each connection's own lookup instead.
   */
  async checkHost(url: URL): Promise<void> {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const addresses = isIP(host) ? [host] : (await dns.promises.lookup(host, { all: true })).map((answer) => answer.address);
    const refused = addresses.find((address) => !this.allows(address));
    if (refused) throw refusal(host, refused);
  }

  /** Sends the request, following redirects within the same rules. */
  async send(request: OutboundRequest): Promise<OutboundResponse> {
    const deadline = Date.now() + this.settings.timeoutMs;
    const credentialHeaders = [...ALWAYS_CREDENTIAL_HEADERS, ...(request.credentialHeaders ?? []).map((h) => h.toLowerCase())];
    let { method, url, body } = request;
    let headers = { ...request.headers };
    for (let redirects = 0; ; redirects++) {
      const { response, location } = await this.exchange(method, url, headers, body, deadline);
      if (location === undefined) return response;
      if (redirects >= this.settings.maxRedirects) {
        throw new OutboundError('unreachable', `${url.host} redirected more than ${this.settings.maxRedirects} times.`);
      }
      const next = URL.canParse(location, url) ? new URL(location, url) : undefined;
      if (!next) throw new OutboundError('unreachable', `${url.host} redirected to an address that is not a URL.`);
      if (next.origin !== url.origin) {
        headers = Object.fromEntries(Object.entries(headers).filter(([name]) => !credentialHeaders.includes(name.toLowerCase())));
      }
      // As browsers do: 303, and 301/302 after a POST, continue as a GET without the body.
      if (response.status === 303 || ((response.status === 301 || response.status === 302) && method === 'POST')) {
        method = 'GET';
        body = undefined;
        headers = Object.fromEntries(Object.entries(headers).filter(([name]) => !/^content-(type|length)$/i.test(name)));
      }
      url = next;
    }
  }

  /** Checks each DNS answer before the connection is made to it. */
  private readonly lookup: LookupFunction = (hostname, options, callback) => {
    dns.lookup(hostname, { all: true, family: options.family, hints: options.hints }, (error, addresses) => {
      if (error) return callback(error, '', 0);
      const refused = addresses.find((answer) => !this.allows(answer.address));
      if (refused) return callback(refusal(hostname, refused.address), '', 0);
      if (options.all) return callback(null, addresses);
      return callback(null, addresses[0].address, addresses[0].family);
    });
  };

  private exchange(
    method: string,
    url: URL,
    headers: Record<string, string>,
    body: string | undefined,
    deadline: number,
  ): Promise<{ response: OutboundResponse; location?: string }> {
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      return Promise.reject(new OutboundError('invalid', `Only http and https URLs can be requested, not ${url.protocol}.`));
    }
    // An address written in the URL is connected to without a DNS lookup, so it is checked here.
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (isIP(host) && !this.allows(host)) return Promise.reject(refusal(host, host));

    return new Promise((resolve, reject) => {
      let settled = false;
      const settle = (outcome: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        outcome();
      };
      const fail = (error: unknown) =>
        settle(() => {
          if (error instanceof OutboundError) return reject(error);
          const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
          reject(new OutboundError('unreachable', `${url.host} cannot be reached: ${code}.`));
        });

      let request: http.ClientRequest;
      try {
        request = (url.protocol === 'https:' ? https : http).request(
          url,
          { method, headers: { ...headers, 'accept-encoding': 'identity' }, lookup: this.lookup, agent: false, ca: this.ca },
          (incoming) => {
            const chunks: Buffer[] = [];
            let size = 0;
            let truncated = false;
            const finish = () =>
              settle(() =>
                resolve({
                  response: {
                    status: incoming.statusCode ?? 0,
                    headers: flatHeaders(incoming.headers),
                    body: Buffer.concat(chunks),
                    truncated,
                  },
                  location: REDIRECTS.has(incoming.statusCode ?? 0) ? incoming.headers.location : undefined,
                }),
              );
            incoming.on('data', (chunk: Buffer) => {
              const room = this.settings.maxResponseBytes - size;
              if (chunk.length > room) {
                chunks.push(chunk.subarray(0, room));
                truncated = true;
                incoming.destroy();
                finish();
                return;
              }
              chunks.push(chunk);
              size += chunk.length;
            });
            incoming.on('end', finish);
            incoming.on('error', fail);
          },
        );
      } catch (error) {
        // Node refuses header names or values it cannot send (control characters, ...).
        reject(new OutboundError('invalid', `The request cannot be sent: ${(error as Error).message}`));
        return;
      }
      const timer = setTimeout(
        () => {
          request.destroy();
          fail(new OutboundError('timeout', `${url.host} did not answer within ${this.settings.timeoutMs} ms.`));
        },
        Math.max(0, deadline - Date.now()),
      );
      request.on('error', fail);
      request.end(body);
    });
  }
}

function flatHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  return Object.fromEntries(
    Object.entries(headers)
      .filter((entry): entry is [string, string | string[]] => entry[1] !== undefined)
      .map(([name, value]) => [name, Array.isArray(value) ? value.join(', ') : value]),
  );
}
