// The page's time to interactive on a slow phone (issue 21): Chromium's network emulation at
// DevTools' "Fast 3G" (563 ms latency, 1.44 Mbit/s down) and 4x CPU slowdown, cold cache, from
// the navigation until the page has asked who is signed in, been answered, and shows an enabled
// Export button. Then a return visit in the same browser: how many bytes of wasm it downloaded.
//
//   node end2end/perf/tti.mjs http://127.0.0.1:3200 [runs]
//
// Prints one line per run and a summary; exits 1 when the median is over 3 s or a return visit
// downloaded wasm.
import { chromium } from '@playwright/test';

const base = process.argv[2] ?? 'http://127.0.0.1:3200';
const runs = Number(process.argv[3] ?? 3);
const BUDGET_MS = 3000;
const FAST_3G = { offline: false, latency: 562.5, downloadThroughput: (1.6 * 1e6 * 0.9) / 8, uploadThroughput: (750 * 1e3 * 0.9) / 8 };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run'],
});

/// Opens a page of `context` with the network and CPU throttled, recording what each file
/// transferred over the network (0 when it came from the cache).
async function throttledPage(context) {
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', FAST_3G);
  await cdp.send('Emulation.setCPUThrottlingRate', { rate: 4 });
  const files = new Map();
  cdp.on('Network.responseReceived', (e) => {
    files.set(e.requestId, { url: e.response.url, encoding: e.response.headers['content-encoding'] ?? e.response.headers['Content-Encoding'] ?? 'identity', bytes: 0, cached: e.response.fromDiskCache || e.response.fromMemoryCache });
  });
  cdp.on('Network.requestServedFromCache', (e) => {
    const f = files.get(e.requestId);
    if (f) f.cached = true;
  });
  cdp.on('Network.loadingFinished', (e) => {
    const f = files.get(e.requestId);
    if (f) f.bytes = f.cached ? 0 : e.encodedDataLength;
  });
  return { page, files };
}

/// Navigates and waits until the page is usable: signed in, answered, Export enabled.
async function visit(page) {
  const t0 = Date.now();
  await page.goto(base + '/', { waitUntil: 'commit' });
  await page.locator('[data-testid=export]:not([disabled])').waitFor({ timeout: 60_000 });
  return Date.now() - t0;
}

const wasmOf = (files) => [...files.values()].filter((f) => /\.wasm(\?|$)/.test(f.url));
const times = [];
let returnWasmBytes = 0;
for (let i = 0; i < runs; i++) {
  // A fresh context is a cold cache; the session cookie comes from signing in through the API.
  const context = await browser.newContext();
  const login = await context.request.post(base + '/api/session', { data: { email: 'bob@acme.test', password: 'export-demo' } });
  if (!login.ok()) throw new Error(`sign-in answered ${login.status()}`);
  const cold = await throttledPage(context);
  const ms = await visit(cold.page);
  times.push(ms);
  const wasm = wasmOf(cold.files);
  const wasmNote = wasm.map((f) => `${f.bytes.toLocaleString('en')} bytes of wasm (${f.encoding})`).join(', ');
  await cold.page.close();
  const warm = await throttledPage(context);
  const again = await visit(warm.page);
  const back = wasmOf(warm.files).reduce((n, f) => n + f.bytes, 0);
  returnWasmBytes += back;
  console.log(`run ${i + 1}: usable after ${ms} ms, ${wasmNote}; return visit usable after ${again} ms, ${back} bytes of wasm downloaded`);
  await context.close();
}
await browser.close();
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
const met = median <= BUDGET_MS && returnWasmBytes === 0;
console.log(`time to interactive (Fast 3G, 4x CPU, cold cache): median ${median} ms of ${runs} runs; budget ${BUDGET_MS} ms: ${median <= BUDGET_MS ? 'met' : 'NOT met'}`);
console.log(`return visits downloaded ${returnWasmBytes} bytes of wasm: ${returnWasmBytes === 0 ? 'met' : 'NOT met'}`);
process.exit(met ? 0 : 1);
