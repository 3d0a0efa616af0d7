import { credentialViolations, refuseCredentials } from '../../core/credentials.ts';
import type { StreamingPipelineRequest } from './schemas.ts';

/** The secret references of a definition: where a secret is kept, which is what belongs there. */
function secretReferencesOf(request: StreamingPipelineRequest): unknown[] {
  const target = request.streamingTarget;
  return [
    request.streamingSource.connection.password,
    ...(target.type === 'abs' ? [target.accountKey] : []),
    ...(target.type === 'snowflake'
      ? [target.connection.authentication.privateKey, target.connection.authentication.passphrase]
      : []),
  ].filter((reference) => reference !== undefined && typeof reference === 'object');
}

/**
 * Refuses a definition that carries a credential anywhere but in its secret references: a property named
 * like one (`apikey`), a host with `user:password@`, a JDBC URL with `password=` (percent-encoded or not),
 * a `mongodb://u:pw@` URL, `SharedAccessKey=`, a `Bearer ...` value (src/core/credentials.ts). 400 naming
 * each field; the value is never echoed.
 */
export function checkNoCredentials(request: StreamingPipelineRequest): void {
  const { advancedProperties, streamingSource, streamingTarget } = request;
  const violations = credentialViolations(
    { advancedProperties, streamingSource, streamingTarget },
    'body',
    'credentials go in a secret reference',
    { skip: new Set(secretReferencesOf(request)) },
  );
  refuseCredentials(violations, 'The definition carries a credential where only a secret reference may be.');
}
