import { readVersion, type Executor } from './database.ts';

/** Characters of JSON that the answers of one remembered read may hold in all: a bound on their memory. */
const REMEMBERED_CHARACTERS = 8 * 1024 * 1024;

interface Answer<T> {
  version: string;
  value: T;
  characters: number;
}

/** Every answer a remembered read keeps (deeply frozen), for serializingKeptAnswersOnce. */
const keptAnswers = new WeakSet<object>();

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const item of Object.values(value)) deepFreeze(item);
    Object.freeze(value);
  }
  return value;
}

/** One store's answers of a read, oldest first, within REMEMBERED_CHARACTERS. */
class Answers<T> {
  private readonly byArguments = new Map<string, Answer<T>>();
  private characters = 0;

  get(key: string, version: string): T | undefined {
    const answer = this.byArguments.get(key);
    return answer?.version === version ? answer.value : undefined;
  }

  set(key: string, version: string, value: T): void {
    this.forget(key);
    const characters = key.length + (JSON.stringify(value)?.length ?? 0);
    if (characters > REMEMBERED_CHARACTERS) return;
    for (const [oldest] of this.byArguments) {
      if (this.characters + characters <= REMEMBERED_CHARACTERS) break;
      this.forget(oldest);
    }
    this.byArguments.set(key, { version, value: deepFreeze(value), characters });
    if (typeof value === 'object' && value !== null) keptAnswers.add(value);
    this.characters += characters;
  }

  private forget(key: string): void {
    this.characters -= this.byArguments.get(key)?.characters ?? 0;
    this.byArguments.delete(key);
  }
}

/**
 * `read`, with its answers remembered per arguments and given again without asking the store for as
 * long as the store's read version (see readVersion) stays what it was before the answer was read: a
 * write by any process changes it. Where the store has no read version (a transaction, remembering
 * turned off), `read` simply runs. The arguments after `db` must be JSON and decide the answer; a rejection is not
 * remembered. Answers are frozen, since several requests may share one.
 */
export function rememberedRead<A extends unknown[], T>(
  read: (db: Executor, ...args: A) => Promise<T>,
): (db: Executor, ...args: A) => Promise<T> {
  const perStore = new WeakMap<Executor, Answers<T>>();
  return async (db, ...args) => {
    const version = await readVersion(db);
    if (version === undefined) return read(db, ...args);
    let answers = perStore.get(db);
    if (!answers) perStore.set(db, (answers = new Answers()));
    const key = JSON.stringify(args);
    const remembered = answers.get(key, version);
    if (remembered !== undefined) return remembered;
    const value = await read(db, ...args);
    // Nothing found is not kept: it would not be given again, and a flood of unknown ids would push out what is.
    if (value !== undefined) answers.set(key, version, value);
    return value;
  };
}

/**
 * `serialize`, serializing each answer a remembered read keeps only once: such an answer is deeply
 * frozen and given to every request until the store changes, so its JSON stays the same too (a page of
 * 25 variables takes ~10 µs to serialize). The JSON lives as long as the answer object (it goes when the
 * answer is forgotten) and is per serializer, i.e. per route and status. Anything else is serialized
 * as usual.
 */
export function serializingKeptAnswersOnce(serialize: (data: unknown) => string): (data: unknown) => string {
  const serialized = new WeakMap<object, string>();
  return (data) => {
    if (typeof data !== 'object' || data === null || !keptAnswers.has(data)) return serialize(data);
    let json = serialized.get(data);
    if (json === undefined) serialized.set(data, (json = serialize(data)));
    return json;
  };
}
