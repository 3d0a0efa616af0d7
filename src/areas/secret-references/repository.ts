import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Executor } from '../../core/db/database.ts';
import { isUniqueViolation, now } from '../../core/db/database.ts';
import { conflict, notFound } from '../../core/problems.ts';
import { countOf, offsetOf } from '../../core/paging.ts';
import type { SecretReferenceTable } from './tables.ts';
import type { CreateSecretReferenceRequest, SecretReference, SecretReferenceQuery } from './schemas.ts';

const OPTIONAL_FIELDS = ['secretKey', 'description', 'vaultName', 'vaultType', 'provider'] as const;

function toSecretReference(row: Selectable<SecretReferenceTable>): SecretReference {
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
  const row: Selectable<SecretReferenceTable> = {
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
    await db.insertInto('secretReferences').values(row).execute();
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`A secret reference named "${name}" already exists in this project.`);
    throw error;
  }
  return toSecretReference(row);
}

/** References of one type, by name; the provider filter applies to the types other than PASSWORD only. */
export async function listSecretReferences(db: Executor, projectId: string, query: SecretReferenceQuery) {
  let filtered = db.selectFrom('secretReferences').where('projectId', '=', projectId).where('type', '=', query.type);
  if (query.provider !== undefined && query.type !== 'PASSWORD') filtered = filtered.where('provider', '=', query.provider);
  const [rows, total] = await Promise.all([
    filtered.selectAll().orderBy('name').limit(query.size).offset(offsetOf(query)).execute(),
    countOf(filtered),
  ]);
  return { results: rows.map(toSecretReference), total };
}

export async function deleteSecretReference(db: Executor, projectId: string, name: string): Promise<void> {
  const result = await db
    .deleteFrom('secretReferences')
    .where('projectId', '=', projectId)
    .where('name', '=', name)
    .executeTakeFirst();
  if (result.numDeletedRows === 0n) throw notFound(`Secret reference "${name}" does not exist in this project.`);
}
