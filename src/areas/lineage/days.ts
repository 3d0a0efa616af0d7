/**
 * A lineage window cut into the pieces its page is counted by. A step's `generatedAt` is the recording
 * server's clock when it writes the step, so once a UTC day has ended SEALED_AFTER_MS ago nothing is recorded
 * into it any more: its count is kept (lineage_days) and read rather than counted again. The rest of the
 * window (a partial first or last day, the days not yet sealed) is counted when read; a 31-day page then
 * walks at most a day or two of rows, not the window's (bench/lineage.ts).
 */

export const DAY_MS = 86_400_000;

/**
 * How long after its end a day is sealed: a write commits within seconds of taking its time, and the
 * processes of one deployment share a clock to well within this.
 */
export const SEALED_AFTER_MS = 3_600_000;

/** [from, before) in ms; `day` (YYYY-MM-DD) when the piece is a whole sealed UTC day, whose count is kept. */
export interface WindowPiece {
  from: number;
  before: number;
  day?: string;
}

/** The window [from, before) as of `now`: its sealed whole days, and the spans between them counted as read. */
export function windowPieces(from: number, before: number, now: number): WindowPiece[] {
  const sealedUntil = Math.floor((now - SEALED_AFTER_MS) / DAY_MS) * DAY_MS;
  const pieces: WindowPiece[] = [];
  const add = (start: number, end: number) => {
    if (end <= start) return;
    const sealed = start % DAY_MS === 0 && end - start === DAY_MS && end <= sealedUntil;
    const last = pieces.at(-1);
    if (!sealed && last && last.day === undefined)
      last.before = end; // two unsealed spans side by side: one
    else
      pieces.push(
        sealed ? { from: start, before: end, day: new Date(start).toISOString().slice(0, 10) } : { from: start, before: end },
      );
  };
  let start = from;
  for (
    let boundary = Math.floor(from / DAY_MS) * DAY_MS + DAY_MS;
    boundary < before && boundary <= sealedUntil;
    boundary += DAY_MS
  ) {
    add(start, boundary);
    start = boundary;
  }
  add(start, before);
  return pieces;
}
