import { compactDecrypt } from 'jose';
import { registerWorkHandler, WorkFailure } from './handlers.ts';

interface WriteSecretPayload {
  jwe: string;
  overwrite: boolean;
}

/** Decrypts a secret the server sent (E15) with the agent's private key and writes it to the vault. */
registerWorkHandler('write-secret', async (work, { privateKey, vault }) => {
  const { jwe, overwrite } = work.payload as WriteSecretPayload;
  let secret: { name: string; key: string; value: unknown };
  try {
    const { plaintext } = await compactDecrypt(jwe, privateKey, {
      keyManagementAlgorithms: ['RSA-OAEP-256'],
      contentEncryptionAlgorithms: ['A256GCM'],
    });
    secret = JSON.parse(new TextDecoder().decode(plaintext));
  } catch {
    throw new WorkFailure(
      "the secret could not be decrypted with this agent's key (was the certificate replaced?)",
      'undecryptable',
    );
  }
  const outcome = await vault.put({ name: secret.name, key: secret.key, value: secret.value, writeId: work.workId, overwrite });
  if (outcome === 'exists') throw new WorkFailure(`the vault already holds ${secret.name}/${secret.key}`, 'exists');
  return { vaultSecretName: secret.name, resolverRef: `${vault.vaultType}:${secret.name}:${secret.key}` };
});
