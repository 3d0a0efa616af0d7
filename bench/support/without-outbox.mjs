// `node --import tsx --import ./bench/support/without-outbox.mjs …`: the process runs the server's code with
// emit() (src/core/outbox.ts) doing nothing: the baseline of bench/events.ts's outbox cost, the same run-state
// changes without their events. For benchmarks only; nothing in src/ knows of it.
import { register } from 'node:module';

register('./without-outbox-hooks.mjs', import.meta.url);
