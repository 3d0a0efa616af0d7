import 'reflect-metadata'; // @peculiar/x509's dependency injection needs it loaded first
import { createPrivateKey, webcrypto, type KeyObject } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const KEY_FILE = 'agent-key.pem';
const CERTIFICATE_FILE = 'agent-certificate.pem';
const ALGORITHM = { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256', publicExponent: new Uint8Array([1, 0, 1]), modulusLength: 3072 };

export interface AgentIdentity {
  /** PEM of the self-signed certificate the agent registers with the server. */
  certificate: string;
  /** The private key; it never leaves the agent's state folder. */
  privateKey: KeyObject;
}

/**
 * The agent's key pair and certificate, made on first start and kept in the state folder (the key
 * readable by the agent's user only). Secrets the server sends are encrypted for this key.
 */
export async function loadOrCreateIdentity(stateDir: string, subject: string): Promise<AgentIdentity> {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const keyPath = path.join(stateDir, KEY_FILE);
  const certificatePath = path.join(stateDir, CERTIFICATE_FILE);
  if (!existsSync(keyPath) || !existsSync(certificatePath)) {
    const keys = (await webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify'])) as CryptoKeyPair;
    const certificate = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(16))).toString('hex'),
      name: `CN=${subject.replace(/[,=+<>#;"\\]/g, '_')}`,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + 5 * 365 * 86_400_000),
      signingAlgorithm: ALGORITHM,
      keys,
      extensions: [new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyEncipherment | x509.KeyUsageFlags.digitalSignature, true)],
    });
    const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
    const keyPem = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' }).export({ format: 'pem', type: 'pkcs8' });
    writeFileSync(keyPath, keyPem, { mode: 0o600 });
    writeFileSync(certificatePath, certificate.toString('pem'), { mode: 0o644 });
  }
  return {
    certificate: readFileSync(certificatePath, 'utf8'),
    privateKey: createPrivateKey(readFileSync(keyPath, 'utf8')),
  };
}
