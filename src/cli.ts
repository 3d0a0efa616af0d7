import { main, reportFailure } from './cli/main.ts';

main(process.argv.slice(2)).catch((error: unknown) => {
  process.exitCode = reportFailure(error);
});
