import type { Config } from '../../core/config.ts';
import { OutboundClient, outboundSettings } from '../../core/outbound.ts';
import type { GitProvider } from './schemas.ts';

/** providerParameters keys each provider requires. */
export const REQUIRED_PROVIDER_PARAMETERS: Record<GitProvider, string[]> = {
  github: [],
  gitlab: ['repositoryId'],
  'azure-devops': ['organization', 'repositoryId', 'tenantId'],
};

/** The user name a provider expects beside an access token used as the HTTPS password. */
export const TOKEN_USER: Record<GitProvider, string> = {
  github: 'x-access-token',
  gitlab: 'oauth2',
  'azure-devops': 'pat',
};

/** Rotates an access token: the provider issues a new one and revokes the one given. */
export interface TokenRotation {
  rotate(token: string, target: { cloneUrl: string; parameters: Record<string, string> }): Promise<string>;
}

/** A rotation the provider refused or that could not be done; its message is the migration's detail. */
export class RotationError extends Error {}

/**
 * GitLab's token rotation (POST /api/v4/personal_access_tokens/self/rotate, authenticated by the
 * token itself; GitLab revokes the old token as it issues the new one). The API is at
 * DPC_GITLAB_API_URL when set, else at the origin of the target's clone URL.
 */
export class GitLabTokenRotation implements TokenRotation {
  private readonly client: OutboundClient;

  constructor(private readonly config: Pick<Config, 'gitlabApiUrl'> & Parameters<typeof outboundSettings>[0]) {
    this.client = new OutboundClient(outboundSettings(config));
  }

  async rotate(token: string, target: { cloneUrl: string }): Promise<string> {
    const base = this.config.gitlabApiUrl ?? new URL(target.cloneUrl).origin;
    const url = new URL(`${base.replace(/\/+$/, '')}/api/v4/personal_access_tokens/self/rotate`);
    const response = await this.client
      .send({ method: 'POST', url, headers: { 'private-token': token }, credentialHeaders: ['private-token'] })
      .catch((error: Error) => {
        throw new RotationError(`GitLab token rotation at ${url.origin} failed: ${error.message}`);
      });
    if (response.status !== 200) {
      const why = response.status === 401 ? ' (the token is not valid: it may have been used, and so revoked, already)' : '';
      throw new RotationError(`GitLab refused to rotate the Git-Provider-Access-Token: HTTP ${response.status}${why}.`);
    }
    let rotated: unknown;
    try {
      rotated = (JSON.parse(response.body.toString('utf8')) as { token?: unknown }).token;
    } catch {
      // handled below
    }
    if (typeof rotated !== 'string' || rotated === '')
      throw new RotationError('GitLab answered the token rotation without a token.');
    return rotated;
  }
}
