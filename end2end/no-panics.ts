import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';

// Fails the run when the server's log (written by start-server.sh) shows a panic: a panic on a
// request's path is a defect even when the request was answered, and no test would see it.
export default async function noPanics() {
  for (const run of ['.run', '.run-catalog']) {
    const log = path.join(__dirname, run, 'server.log');
    if (!existsSync(log)) {
      throw new Error(`${log} is missing: start-server.sh and start-catalog-server.sh keep the servers' errors there`);
    }
    const lines = readFileSync(log, 'utf8').split('\n');
    const panics = lines.flatMap((line, i) => (line.includes('panicked at') ? [lines.slice(i, i + 2).join('\n')] : []));
    if (panics.length > 0) {
      throw new Error(`the server of ${run} panicked ${panics.length} time(s) during the run:\n${panics.join('\n')}`);
    }
  }
}
