/**
 * The secret references' rules: unique names in the project, optional fields shown only when set, and a provider
 * filter that applies to the types other than PASSWORD. The SQL is the repository's.
 */
import { randomUUID } from 'node:crypto';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import type { CreateSecretReferenceRequest, SecretReference, SecretReferenceQuery } from './schemas.ts';
import {
  deleteSecretReferenceRow,
  insertSecretReference,
  listSecretReferenceRows,
  type SecretReferenceRow,
} from './repository.ts';

const OPTIONAL_FIELDS = ['secretKey', 'description', 'vaultName', 'vaultType', 'provider'] as const;

function toSecretReference(row: SecretReferenceRow): SecretReference {
  const reference: SecretReference = { name: row.name, type: row.type as SecretReference['type'], secretName: row.secretName };
  for (const field of OPTIONAL_FIELDS) if (row[field] !== null) reference[field] = row[field];
  return reference;
}

export async function createSecretReference(
  db: Executor,
  projectId: string,
  name: string,
  request: CreateSecretReferenceRequest,
): Promise<SecretReference> {
  const row: SecretReferenceRow = {
    id: randomUUID(),
    projectId,
    name,
    type: request.type,
    secretName: request.secretName,
    secretKey: request.secretKey ?? null,
    description: request.description ?? null,
    vaultName: request.vaultName ?? null,
    vaultType: request.vaultType ?? null,
    provider: request.provider ?? null,
    createdAt: now(),
  };
  try {
    await insertSecretReference(db, row);
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`A secret reference named "${name}" already exists in this project.`);
    throw error;
  }
  return toSecretReference(row);
}

/** References of one type, by name; the provider filter applies to the types other than PASSWORD only. */
export async function listSecretReferences(db: Executor, projectId: string, query: SecretReferenceQuery) {
  const filter = {
    type: query.type,
    ...(query.provider !== undefined && query.type !== 'PASSWORD' && { provider: query.provider }),
  };
  const { rows, total } = await listSecretReferenceRows(db, projectId, filter, query);
  return { results: rows.map(toSecretReference), total };
}

export async function deleteSecretReference(db: Executor, projectId: string, name: string): Promise<void> {
  if (!(await deleteSecretReferenceRow(db, projectId, name)))
    throw notFound(`Secret reference "${name}" does not exist in this project.`);
}
