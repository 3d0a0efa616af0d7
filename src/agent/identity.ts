import { createPrivateKey, webcrypto, X509Certificate, type KeyObject } from 'node:crypto';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { x509 } from './x509.ts';

const KEY_FILE = 'agent-key.pem';
const CERTIFICATE_FILE = 'agent-certificate.pem';
const RSA_BITS = 3072;
const VALID_DAYS = 365;
/** A certificate this close to its end is replaced (with a new key) on start. */
const RENEW_BEFORE_MS = 7 * 24 * 3600 * 1000;

export interface AgentIdentity {
  privateKey: KeyObject;
  certificatePem: string;
}

async function readIdentity(stateDir: string): Promise<AgentIdentity | undefined> {
  try {
    const [keyPem, certificatePem] = await Promise.all([
      readFile(path.join(stateDir, KEY_FILE), 'utf8'),
      readFile(path.join(stateDir, CERTIFICATE_FILE), 'utf8'),
    ]);
    if (Date.parse(new X509Certificate(certificatePem).validTo) - Date.now() < RENEW_BEFORE_MS) return undefined;
    return { privateKey: createPrivateKey(keyPem), certificatePem };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

/** A new RSA key pair and a self-signed certificate over it, naming the agent. */
async function newIdentity(subject: string): Promise<AgentIdentity> {
  const algorithm = {
    name: 'RSASSA-PKCS1-v1_5',
    hash: 'SHA-256',
    publicExponent: new Uint8Array([1, 0, 1]),
    modulusLength: RSA_BITS,
  };
  const keys = await webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify']);
  const notBefore = new Date(Date.now() - 60_000);
  const certificate = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)))
      .toString('hex')
      .replace(/^[89a-f]/, '1'),
    name: `CN=${subject.replace(/[,+="\\<>#;]/g, '_')}`,
    notBefore,
    notAfter: new Date(notBefore.getTime() + VALID_DAYS * 24 * 3600 * 1000),
    signingAlgorithm: algorithm,
    keys: keys as unknown as CryptoKeyPair,
    extensions: [new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true)],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  return {
    privateKey: createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' }),
    certificatePem: certificate.toString('pem'),
  };
}

/**
 * The agent's key pair and certificate, made on first start and kept in the state folder (the folder mode
 * 0700, the files 0600): the private key never leaves it. An expiring certificate is replaced with a new pair.
 */
export async function loadOrCreateIdentity(stateDir: string, subject: string): Promise<AgentIdentity> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  await chmod(stateDir, 0o700);
  const existing = await readIdentity(stateDir);
  if (existing) return existing;
  const identity = await newIdentity(subject);
  const keyPem = identity.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
  for (const [file, contents] of [
    [KEY_FILE, keyPem],
    [CERTIFICATE_FILE, identity.certificatePem],
  ]) {
    const full = path.join(stateDir, file);
    await writeFile(full, contents, { mode: 0o600 });
    await chmod(full, 0o600);
  }
  return identity;
}
