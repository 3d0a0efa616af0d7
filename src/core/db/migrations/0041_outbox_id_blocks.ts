import { sql } from 'kysely';
import type { PortableMigration } from './types.ts';

/**
 * PostgreSQL: more than 4,095 outbox events in one transaction (core/db/database.ts, postgresCommitText). An
 * event's id is a transaction id × 4096 + its place; a transaction whose events do not fit its own id's block
 * takes the block of a subtransaction's id for each further 4,096: `dpc_outbox_id_block()` runs a
 * subtransaction (a PL/pgSQL block with an exception clause) that writes a row of `outbox_id_blocks` and
 * deletes it, and answers that subtransaction's id (the row's xmin, widened to 64 bits with the epoch of the
 * transaction's own id, which is older). A subtransaction's id is newer than its transaction's id and is
 * nobody else's, and it commits (and becomes readable past the safe point) with its transaction.
 */
export const outboxIdBlocks: PortableMigration = {
  async up(db, dialect) {
    if (dialect !== 'postgres') return;
    await sql`create unlogged table outbox_id_blocks (taken boolean not null)`.execute(db);
    await sql`
      create function dpc_outbox_id_block() returns bigint language plpgsql volatile as $$
      declare
        top bigint := pg_current_xact_id()::text::bigint;
        sub xid;
        place tid;
        block bigint;
      begin
        begin
          insert into outbox_id_blocks values (true) returning xmin, ctid into sub, place;
          delete from outbox_id_blocks where ctid = place;
        exception when others then
          raise;
        end;
        block := (top >> 32 << 32) + sub::text::bigint;
        if block < top then
          block := block + (1::bigint << 32);
        end if;
        return block;
      end
      $$`.execute(db);
  },
};
