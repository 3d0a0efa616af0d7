import type { Generated } from 'kysely';

export interface LineageEventTable {
  id: Generated<number>;
  accountId: string;
  projectId: string;
  executionId: string;
  /** When the server recorded the event (the window `generatedFrom`/`generatedBefore` reads). */
  generatedAt: string;
  /** The OpenLineage RunEvent, JSON. */
  event: string;
}

export interface LineageTables {
  lineageEvents: LineageEventTable;
}

declare module '../../core/db/schema.ts' {
  interface Database extends LineageTables {}
}
