/** A Server-Sent Events client for tests: reads frames as they arrive and hands out the events. */
export interface StreamEvent {
  id: number;
  type: string;
  body: { id: number; type: string; projectId: string | null; subject: string; data: Record<string, any>; occurredAt: string };
}

export class EventStream {
  private readonly events: StreamEvent[] = [];
  private waiters: (() => void)[] = [];
  private ended = false;
  comments: string[] = [];

  private constructor(
    readonly status: number,
    private readonly controller: AbortController,
  ) {}

  /** Opens `${baseUrl}/dpc/v1/events/stream${query}`; answers once the headers (and the first comment) arrived. */
  static async open(
    baseUrl: string,
    token: string,
    options: { query?: string; lastEventId?: number | string } = {},
  ): Promise<EventStream & { problem?: any }> {
    const controller = new AbortController();
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (options.lastEventId !== undefined) headers['last-event-id'] = String(options.lastEventId);
    const response = await fetch(`${baseUrl}/dpc/v1/events/stream${options.query ?? ''}`, { headers, signal: controller.signal });
    const stream = new EventStream(response.status, controller);
    if (response.status !== 200) {
      return Object.assign(stream, { problem: await response.json() });
    }
    const subscribed = new Promise<void>((resolve) => stream.waiters.push(resolve));
    void stream.read(response.body!);
    await subscribed;
    return stream;
  }

  private async read(body: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let pending = '';
    try {
      for await (const chunk of body) {
        pending += decoder.decode(chunk, { stream: true });
        let end: number;
        while ((end = pending.indexOf('\n\n')) >= 0) {
          const frame = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const fields: Record<string, string> = {};
          for (const line of frame.split('\n')) {
            if (line.startsWith(':')) this.comments.push(line.slice(1).trim());
            const colon = line.indexOf(':');
            if (colon > 0) fields[line.slice(0, colon)] = line.slice(colon + 1).trimStart();
          }
          if (fields.data !== undefined) {
            this.events.push({ id: Number(fields.id), type: fields.event, body: JSON.parse(fields.data) });
          }
          this.wake();
        }
      }
    } catch {
      // aborted
    }
    this.ended = true;
    this.wake();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter();
  }

  /** Waits (up to `timeoutMs`) until `count` events have arrived in all; answers them all. */
  async take(count: number, timeoutMs = 15_000): Promise<StreamEvent[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.events.length < count) {
      if (this.ended) throw new Error(`the stream ended after ${this.events.length} of ${count} events`);
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(
          `only ${this.events.length} of ${count} events arrived: ${JSON.stringify(this.events.map((e) => e.type))}`,
        );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return [...this.events];
  }

  /** The events received so far. */
  get received(): StreamEvent[] {
    return [...this.events];
  }

  get isEnded(): boolean {
    return this.ended;
  }

  close(): void {
    this.controller.abort();
  }
}
