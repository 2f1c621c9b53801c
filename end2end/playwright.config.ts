import { defineConfig } from '@playwright/test';

const port = Number(process.env.E2E_PORT ?? 3100);
// A second server, on a catalog that is not the demo's (tests/catalog.spec.ts).
const catalogPort = Number(process.env.E2E_CATALOG_PORT ?? 3101);
// The organisation's OpenID Connect provider the first server signs users in through
// (tests/oidc.spec.ts): `oidc-provider` from npm.
const oidcPort = Number(process.env.E2E_OIDC_PORT ?? 3102);

export default defineConfig({
  testDir: './tests',
  timeout: 120_000,
  workers: 1,
  reporter: 'list',
  // After every run: the server's log shows no panic (a request's answer can go out while a task
  // it started panics; the page's render once did, in an effect that outlived its request).
  globalTeardown: './no-panics.ts',
  use: {
    baseURL: `http://127.0.0.1:${port}`,
    acceptDownloads: true,
    launchOptions: {
      // Debian's Chromium; Playwright never downloads a browser here.
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-dev-shm-usage',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    },
  },
  // Every test runs twice: in English, and in Arabic (right-to-left), the language a browser
  // asking for `ar` first is served.
  projects: [
    { name: 'en', use: { locale: 'en-US' } },
    { name: 'ar', use: { locale: 'ar' } },
  ],
  webServer: [
    {
      command: 'node ./oidc/provider.mjs',
      url: `http://127.0.0.1:${oidcPort}/.well-known/openid-configuration`,
      timeout: 60_000,
      reuseExistingServer: false,
      stdout: 'pipe',
      stderr: 'pipe',
    },
    {
      command: 'bash ./start-server.sh',
      url: `http://127.0.0.1:${port}/healthz`,
      timeout: 300_000,
      reuseExistingServer: false,
      stdout: 'pipe',
      stderr: 'pipe',
    },
    {
      command: 'bash ./start-catalog-server.sh',
      url: `http://127.0.0.1:${catalogPort}/healthz`,
      timeout: 300_000,
      reuseExistingServer: false,
      stdout: 'pipe',
      stderr: 'pipe',
    },
  ],
});
