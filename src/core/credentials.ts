/**
 * Names under which requests and configurations carry credentials. Where this server keeps plain values
 * (connector profiles, streaming pipeline properties), such a name may be declared but holds no value:
 * credentials stay in the customer's vault and are given as secret references.
 */
export const CREDENTIAL_NAME =
  /^(authorization|proxy-authorization|cookie|x-api-key|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|password|passwd|pwd|secret|client[_-]?secret|private[_-]?key|account[_-]?key|secret[_-]?key|sas[_-]?token)$/i;
