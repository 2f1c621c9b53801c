import { test, expect, Page, BrowserContext } from '@playwright/test';
import { parse } from 'csv-parse/sync';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { gunzipSync } from 'node:zlib';
import { e2eDatabaseUrl, query, lang, shot, signIn } from './support';

// The server runs its worker with `each_chunk=sleep(…)` (see start-server.sh): an export of the
// whole range takes several seconds, one of the last 7 days a moment. The tests wait on states
// the page shows, never on time.
test.describe.configure({ mode: 'serial' });

const BOB = 'bob@acme.test';
const SLOT = 'exportd.intent.acme.bob@acme.test';
const SETTLED = ['idle', 'ready', 'failed', 'cancelled', 'expired'];
const TERMINAL = /^(ready|failed|cancelled|expired)$/;

async function exportsSince(t0: number, email = BOB): Promise<{ id: string; status: string }[]> {
  return query(
    'SELECT e.id, e.status FROM jobs e JOIN users u ON u.id = e.actor_id WHERE u.email = $1 AND e.created_at >= $2 ORDER BY e.created_at',
    [email, t0],
  );
}

function exportd(args: string[]) {
  const root = `${__dirname}/../..`;
  const exe = process.env.EXPORTD_BIN ?? `${process.env.CARGO_TARGET_DIR ?? `${root}/target`}/debug/exportd`;
  execFileSync(exe, args, { env: { ...process.env, DATABASE_URL: e2eDatabaseUrl() }, stdio: 'pipe' });
}

/// English and in Arabic, by the browser's Accept-Language).
/// The few words the tests read, in each language.
const WORDS = {
  en: {
    expired: 'expired', partsDone: (n: string) => `of ${n} parts done`, bundle: 'ZIP', analyst: 'analyst',
    digest: 'SHA-256', size: / (B|KiB|MiB)\b/, refusedExpired: 'The download was refused: The file has expired.',
  },
  ar: {
    expired: 'منتهي الصلاحية', partsDone: (n: string) => `من ${n}`, bundle: 'ZIP', analyst: 'محلل',
    digest: 'بصمة SHA-256', size: / (بايت|كيلوبايت|ميغابايت)/, refusedExpired: 'رُفض التنزيل: انتهت صلاحية الملف.',
  },
};
const words = () => WORDS[lang()];

/// Saves a screenshot named by the page's language at the start and `name`.
/// The whole two years of demo data: a slow export.
async function wholeRange(page: Page) {
  // By name, not label: the same in English and Arabic.
  await page.locator('select[name=range]').selectOption('custom');
  const today = new Date();
  const from = new Date(today.getTime() - 800 * 86_400_000);
  await page.locator('input[name=from]').fill(from.toISOString().slice(0, 10));
  await page.locator('input[name=to]').fill(today.toISOString().slice(0, 10));
}

const status = (page: Page) => page.getByTestId('status');

/// Clicks Export and waits until the export the form describes (a quick range) is ready.
async function exportUntilReady(page: Page) {
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
}

async function settle(page: Page) {
  await expect(status(page)).toHaveAttribute('data-state', TERMINAL, { timeout: 90_000 });
}

async function cancelIfRunning(page: Page) {
  const state = await status(page).getAttribute('data-state');
  if (state && !SETTLED.includes(state)) {
    await page.getByTestId('cancel').click();
    await settle(page);
  }
}

/// Records on the page, from its first script, whether Export was ever enabled while the
/// shown state was unsettled.
async function watchExportButton(context: BrowserContext) {
  await context.addInitScript((settled: string[]) => {
    (window as any).__enabledWhileUnsettled = [];
    const check = () => {
      const button = document.querySelector('[data-testid=export]') as HTMLButtonElement | null;
      const state = document.querySelector('[data-testid=status]')?.getAttribute('data-state');
      if (button && !button.disabled && state && !settled.includes(state)) {
        (window as any).__enabledWhileUnsettled.push(state);
      }
      if (button && !button.disabled && (window as any).__storedUnsettled?.()) {
        (window as any).__enabledWhileUnsettled.push(`stored intent, state ${state}`);
      }
    };
    (window as any).__storedUnsettled = () => {
      const raw = localStorage.getItem('exportd.intent.acme.bob@acme.test');
      return raw ? !JSON.parse(raw).settled : false;
    };
    new MutationObserver(check).observe(document, { subtree: true, childList: true, attributes: true });
  }, SETTLED);
}

test('1: a double click on Export makes one operation', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await shot(page, 'form');
  await page.getByTestId('export').dblclick();
  await settle(page);
  await expect(status(page)).toHaveAttribute('data-state', 'ready');
  const rows = await exportsSince(t0);
  expect(rows.length).toBe(1);
  await expect(status(page)).toHaveAttribute('data-op', rows[0].id);
  const intent = await page.evaluate((slot) => JSON.parse(localStorage.getItem(slot)!), SLOT);
  expect(intent.key).toMatch(/^[0-9a-f-]{36}$/);
  expect(intent.id).toBe(rows[0].id);
  await shot(page, 'ready');
});

test('2: a create answer lost after the server committed is retried with the same key and shows the one operation', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  const keys: string[] = [];
  let lost = false;
  await page.route('**/sfn/create_export', async (route) => {
    keys.push(route.request().postDataJSON().key);
    if (!lost) {
      lost = true;
      // The request reaches the server and commits; its answer never reaches the page.
      const answer = await route.fetch();
      expect(answer.status()).toBe(200);
      await route.abort('connectionreset');
    } else {
      await route.continue();
    }
  });
  await page.getByTestId('export').click();
  await settle(page);
  expect(keys.length).toBeGreaterThanOrEqual(2);
  expect(new Set(keys).size).toBe(1);
  const rows = await exportsSince(t0);
  expect(rows.length).toBe(1);
  await expect(status(page)).toHaveAttribute('data-op', rows[0].id);
});

test('3: a reload while running resumes the same operation without a create, Export disabled throughout', async ({ page, context }) => {
  await watchExportButton(context);
  const t0 = Date.now();
  await signIn(page, BOB);
  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  await expect(page.getByTestId('progress')).toBeVisible();
  await shot(page, 'running');
  const [op] = await exportsSince(t0);

  const creates: string[] = [];
  page.on('request', (r) => { if (r.url().includes('/sfn/create_export')) creates.push(r.url()); });
  // The first status call after the reload is held until the page has been looked at.
  let release!: () => void;
  const held = new Promise<void>((resolve) => { release = resolve; });
  let first = true;
  await page.route('**/sfn/export_status', async (route) => {
    if (first) {
      first = false;
      await held;
    }
    await route.continue();
  });
  await page.reload();
  await expect(status(page)).toHaveAttribute('data-state', 'resuming');
  await expect(page.getByTestId('export')).toBeDisabled();
  release();
  await expect(status(page)).toHaveAttribute('data-op', op.id);
  await expect(status(page)).toHaveAttribute('data-state', /running|ready/, { timeout: 30_000 });
  await settle(page);
  expect(creates).toEqual([]);
  expect(await page.evaluate(() => (window as any).__enabledWhileUnsettled)).toEqual([]);
  expect((await exportsSince(t0)).length).toBe(1);
});

test('4: a second tab shows the same operation and starts no other while it is in flight', async ({ page, context }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', /queued|running/);
  const second = await context.newPage();
  await second.goto('/');
  await expect(second.getByTestId('who')).toHaveText(BOB);
  const [op] = await exportsSince(t0);
  await expect(status(second)).toHaveAttribute('data-op', op.id);
  await expect(status(second)).toHaveAttribute('data-state', /queued|running/);
  await expect(second.getByTestId('export')).toBeDisabled();
  // Submitting the form anyway (Enter in a field) starts nothing.
  await second.locator('input[name=timezone]').press('Enter');
  await second.getByTestId('export').click({ force: true });
  expect((await exportsSince(t0)).length).toBe(1);
  await page.getByTestId('cancel').click();
  await expect(status(second)).toHaveAttribute('data-state', TERMINAL, { timeout: 60_000 });
  await settle(page);
  expect((await exportsSince(t0)).length).toBe(1);
});

test('5: cancel while running ends cancelled with no download; Download twice mints two links and makes no operation', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  await page.getByTestId('cancel').click();
  await expect(status(page)).toHaveAttribute('data-state', 'cancelled', { timeout: 60_000 });
  await expect(page.getByTestId('download')).toHaveCount(0);
  const [cancelled] = await exportsSince(t0);
  expect(cancelled.status).toBe('cancelled');

  await page.locator('select[name=range]').selectOption('last_7_days');
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const ready = (await exportsSince(t0))[1];
  for (let i = 0; i < 2; i++) {
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
    expect(readFileSync((await download.path())!, 'utf8').length).toBeGreaterThan(0);
  }
  const minted = await query<{ n: string }>("SELECT COUNT(*) AS n FROM job_events WHERE job_id = $1 AND detail = 'download link minted'", [ready.id]);
  expect(Number(minted[0].n)).toBe(2);
  expect((await exportsSince(t0)).length).toBe(2);
  await expect(page.getByTestId('recent-row').first()).toHaveAttribute('data-op', ready.id);
  await shot(page, 'list');
});

test('6: a role revoked through the CLI during an export shows the failure and its reason, and the download is refused', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  try {
    exportd(['user', 'set-role', BOB, 'viewer']);
    await expect(status(page)).toHaveAttribute('data-state', 'failed', { timeout: 60_000 });
    await expect(page.getByTestId('failure-code')).toHaveText(/revoked|not_permitted|permission/);
    await expect(page.getByTestId('download')).toHaveCount(0);
    await shot(page, 'failed');
    const [op] = await exportsSince(t0);
    expect(op.status).toBe('failed');
    const refused = await page.request.get(`/api/exports/${op.id}/download`, { maxRedirects: 0 });
    expect([403, 409]).toContain(refused.status());
    expect(refused.headers()['content-type']).toBe('application/problem+json');
  } finally {
    exportd(['user', 'set-role', BOB, 'analyst']);
  }
});

test("7: another tenant's operation id planted in localStorage shows nothing of it", async ({ page, browser }) => {
  const gina = await browser.newContext();
  const ginaPage = await gina.newPage();
  await signIn(ginaPage, 'gina@globex.test');
  await ginaPage.getByTestId('export').click();
  await expect(status(ginaPage)).toHaveAttribute('data-state', TERMINAL, { timeout: 60_000 });
  const theirs = await status(ginaPage).getAttribute('data-op');
  expect(theirs).toMatch(/^exp_/);
  await gina.close();

  await signIn(page, BOB);
  await expect(status(page)).toHaveAttribute('data-state', /^(idle|ready|failed|cancelled|expired)$/, { timeout: 60_000 });
  await page.evaluate(([slot, id]) => {
    localStorage.setItem(slot, JSON.stringify({ key: 'planted', request: { report: 'orders' }, id, settled: false }));
  }, [SLOT, theirs!]);
  await page.reload();
  await expect(page.getByTestId('who')).toHaveText(BOB);
  await expect(status(page)).toHaveAttribute('data-state', 'idle');
  await expect(status(page)).toHaveAttribute('data-op', '');
  expect(await page.content()).not.toContain(theirs!);
  expect(await page.evaluate((slot) => localStorage.getItem(slot), SLOT)).toBeNull();
});

test('9: a server function refuses another origin, and its error reaches the page as the typed problem', async ({ page }) => {
  await signIn(page, BOB);
  const refused = await page.request.post('/sfn/create_export', {
    headers: { Origin: 'https://evil.example', Accept: 'application/json' },
    data: { key: 'k-evil', request: { report: 'orders' } },
  });
  expect(refused.status()).toBe(403);
  expect(refused.headers()['content-type']).toBe('application/problem+json');
  expect((await refused.json()).code).toBe('cross-origin');

  const t0 = Date.now();
  await page.locator('input[name=timezone]').fill('Mars/Olympus_Mons');
  const [answer] = await Promise.all([
    page.waitForResponse((r) => r.url().includes('/sfn/create_export')),
    page.getByTestId('export').click(),
  ]);
  expect(answer.status()).toBe(422);
  expect((await answer.json()).code).toBe('invalid-request');
  await expect(page.getByTestId('error-timezone')).toBeVisible();
  await expect(status(page)).toHaveAttribute('data-state', 'idle');
  await expect(page.getByTestId('export')).toBeEnabled();
  expect((await exportsSince(t0)).length).toBe(0);
});

test('the downloaded file of a ready export has the rows of the database', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await page.locator('select[name=report]').selectOption('orders');
  await page.locator('select[name=range]').selectOption('last_7_days');
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const [op] = await query<{ id: string; resolved: string }>('SELECT id, resolved FROM jobs WHERE created_at >= $1', [t0]);
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  const text = readFileSync((await download.path())!, 'utf8');
  const rows: string[][] = parse(text, { relax_column_count: false });
  const header = rows.shift()!;
  expect(header).not.toContain('customer_email');
  const idIndex = header.indexOf('order_id');
  expect(idIndex).toBeGreaterThanOrEqual(0);
  const resolved = JSON.parse(op.resolved);
  const expected = await query<{ id: string }>(
    "SELECT o.id FROM orders o JOIN tenants t ON t.id = o.tenant_id WHERE t.slug = 'acme' AND o.placed_at >= $1 AND o.placed_at < $2 ORDER BY o.id",
    [Date.parse(resolved.from), Date.parse(resolved.to)],
  );
  expect(expected.length).toBeGreaterThan(0);
  expect(rows.map((r) => r[idIndex])).toEqual(expected.map((r) => String(r.id)));
});

test('the page is usable on a 360 px wide screen: nothing is wider than the screen and Export can be reached', async ({ page }) => {
  await page.setViewportSize({ width: 360, height: 740 });
  await signIn(page, BOB);
  await page.locator('select[name=range]').selectOption('custom');
  const widest = await page.evaluate(() => document.documentElement.scrollWidth);
  expect(widest).toBeLessThanOrEqual(360);
  await page.getByTestId('export').scrollIntoViewIfNeeded();
  await expect(page.getByTestId('export')).toBeInViewport();
  await shot(page, '360px');
});

test('8: the Arabic page has lang="ar" and dir="rtl" from the first server-rendered byte, shows the same states, and its file has the rows of the database', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  // The English project switches; the Arabic one starts there and switches twice, to show the
  // switch goes both ways.
  if (lang() === 'ar') {
    await page.getByTestId('language').click();
    await expect(page.locator('html')).toHaveAttribute('lang', 'en');
  }
  await page.getByTestId('language').click();
  await expect(page.locator('html')).toHaveAttribute('lang', 'ar');
  await expect(page.locator('html')).toHaveAttribute('dir', 'rtl');
  await expect(page.getByTestId('export')).toHaveText('تصدير');
  const html = await (await page.request.get('/')).text();
  expect(html).toMatch(/<html[^>]*\blang="ar"/);
  expect(html).toMatch(/<html[^>]*\bdir="rtl"/);
  await page.reload();
  await expect(page.getByTestId('who')).toHaveText(BOB);
  await expect(page.locator('html')).toHaveAttribute('dir', 'rtl');
  await shot(page, 'switched-to-arabic-form');

  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  await expect(status(page)).toContainText('قيد التشغيل');
  await shot(page, 'switched-to-arabic-running');
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  await expect(status(page)).toContainText('جاهز');
  await shot(page, 'switched-to-arabic-ready');
  const [op] = await query<{ id: string; resolved: string }>('SELECT id, resolved FROM jobs WHERE created_at >= $1', [t0]);
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  const rows: string[][] = parse(readFileSync((await download.path())!, 'utf8'));
  const header = rows.shift()!;
  const idIndex = header.indexOf('order_id');
  const resolved = JSON.parse(op.resolved);
  const expected = await query<{ id: string }>(
    "SELECT o.id FROM orders o JOIN tenants t ON t.id = o.tenant_id WHERE t.slug = 'acme' AND o.placed_at >= $1 AND o.placed_at < $2 ORDER BY o.id",
    [Date.parse(resolved.from), Date.parse(resolved.to)],
  );
  expect(expected.length).toBeGreaterThan(1000);
  expect(rows.map((r) => r[idIndex])).toEqual(expected.map((r) => String(r.id)));
  // Numbers are written for the page's language: the row count as the browser's own Intl
  // writes it for Arabic (grouped; Chromium's data keeps Latin digits), never the plain digits.
  const arabicCount = await page.evaluate((n) => new Intl.NumberFormat('ar').format(n), expected.length);
  expect(arabicCount).not.toBe(String(expected.length));
  await expect(status(page)).toContainText(arabicCount);
  await shot(page, 'switched-to-arabic-list');

  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  try {
    exportd(['user', 'set-role', BOB, 'viewer']);
    await expect(status(page)).toHaveAttribute('data-state', 'failed', { timeout: 60_000 });
    await expect(status(page)).toContainText('لم يعد مسموحًا لك');
    await shot(page, 'switched-to-arabic-failed');
  } finally {
    exportd(['user', 'set-role', BOB, 'analyst']);
  }
});

test('a large export in parts shows its parts as they are done, then offers the bundle and each part alone', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await wholeRange(page);
  await page.locator('input[name=consistency]').check();
  await page.locator('input[name=compression]').check();
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  const [op] = await query<{ id: string; request: string; resolved: string }>('SELECT id, request, resolved FROM jobs WHERE created_at >= $1', [t0]);
  const request = JSON.parse(op.request);
  expect(request.consistency).toBe('checkpointed');
  expect(request.options.compression).toBe('gzip');
  const resolved = JSON.parse(op.resolved);
  const inRange = "FROM orders o JOIN tenants t ON t.id = o.tenant_id WHERE t.slug = 'acme' AND o.placed_at >= $1 AND o.placed_at < $2";
  const [{ n }] = await query<{ n: string }>(`SELECT COUNT(*) AS n ${inRange}`, [Date.parse(resolved.from), Date.parse(resolved.to)]);
  const parts = Math.ceil(Number(n) / 5000);
  expect(parts).toBeGreaterThan(1);
  const progress = page.getByTestId('parts-progress');
  await expect(progress).toHaveAttribute('data-expected', String(parts), { timeout: 30_000 });
  await expect(progress).toContainText(words().partsDone(await page.evaluate(([n, l]) => new Intl.NumberFormat(l).format(n), [parts, lang()] as const)));
  await shot(page, 'parts-running');

  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 90_000 });
  await expect(page.getByTestId('download')).toContainText(words().bundle);
  const [bundle] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  expect(bundle.suggestedFilename()).toBe(`orders-${op.id}.zip`);
  const zip = readFileSync((await bundle.path())!);
  expect([...zip.subarray(0, 4)]).toEqual([0x50, 0x4b, 0x03, 0x04]);
  await page.getByTestId('parts').locator('summary').click();
  await expect(page.getByTestId('part-download')).toHaveCount(parts);
  await shot(page, 'parts-ready');
  const [part] = await Promise.all([page.waitForEvent('download'), page.getByTestId('part-download').nth(1).click()]);
  expect(part.suggestedFilename()).toBe(`orders-${op.id}-part-00002.csv.gz`);
  const rows: string[][] = parse(gunzipSync(readFileSync((await part.path())!)).toString('utf8'), { relax_column_count: false });
  const header = rows.shift()!;
  const idIndex = header.indexOf('order_id');
  const expected = await query<{ id: string }>(`SELECT o.id ${inRange} ORDER BY o.id OFFSET 5000 LIMIT 5000`, [Date.parse(resolved.from), Date.parse(resolved.to)]);
  expect(rows.map((r) => r[idIndex])).toEqual(expected.map((r) => String(r.id)));
});

test('over plain HTTP on a LAN address, where crypto.randomUUID does not exist, a click still sends one export with a fresh v4 key', async ({ browser }) => {
  // A page served over http:// from an address other than localhost is not a secure context:
  // the browser has crypto.getRandomValues but no crypto.randomUUID.
  const context = await browser.newContext();
  await context.addInitScript(() => {
    delete (Crypto.prototype as unknown as { randomUUID?: unknown }).randomUUID;
  });
  const page = await context.newPage();
  const t0 = Date.now();
  await signIn(page, BOB);
  expect(await page.evaluate(() => typeof (crypto as unknown as { randomUUID?: unknown }).randomUUID)).toBe('undefined');
  await exportUntilReady(page);
  const made = await exportsSince(t0);
  expect(made).toHaveLength(1);
  const [row] = await query<{ idempotency_key: string }>('SELECT idempotency_key FROM jobs WHERE id = $1', [made[0].id]);
  expect(row.idempotency_key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  await context.close();
});

test('a running export whose total is not counted yet shows a progress bar that is not full', async ({ page }) => {
  // Hold the total back as a worker still counting would: the first answers of a new attempt.
  await page.route('**/sfn/export_status', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    if (body.status === 'running') {
      body.progress.rows_total = null;
    }
    await route.fulfill({ response, json: body });
  });
  await signIn(page, BOB);
  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  const bar = page.getByTestId('progress');
  await expect(bar).toBeVisible();
  expect(await bar.evaluate((el) => el.matches(':indeterminate'))).toBe(true);
  expect(await bar.evaluate((el) => (el as HTMLProgressElement).position)).toBe(-1);
  await cancelIfRunning(page);
});

test('an export whose file has expired is listed as expired, with no download', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await exportUntilReady(page);
  const [op] = await exportsSince(t0);
  // What the janitor records when the file's retention ends.
  await query('UPDATE jobs SET artifact_expired = true WHERE id = $1', [op.id]);
  await page.reload();
  const row = page.locator(`[data-testid=recent-row][data-op="${op.id}"]`);
  await expect(row).toHaveAttribute('data-state', 'expired');
  await expect(row.locator('td').first()).toHaveText(words().expired);
  await expect(row.getByTestId('recent-download')).toHaveCount(0);
});

test('signing out clears the list, notice and field errors of the user before, and the next user sees only their own', async ({ page }) => {
  await signIn(page, BOB);
  await exportUntilReady(page);
  const rows = page.getByTestId('recent-row');
  await expect(rows.first()).toBeVisible();
  const bobsOp = await rows.first().getAttribute('data-op');
  // A request the server refuses field by field: the end before the start.
  await page.locator('select[name=range]').selectOption('custom');
  await page.locator('input[name=from]').fill('2026-12-10');
  await page.locator('input[name=to]').fill('2026-01-01');
  await page.getByTestId('export').click();
  await expect(page.locator('.field-error, [data-testid=form-errors] li, [data-testid=notice]').first()).toBeVisible();

  await page.getByTestId('sign-out').click();
  await expect(page.locator('input[name=email]')).toBeVisible();
  await expect(rows).toHaveCount(0);
  await expect(page.locator('.field-error, [data-testid=form-errors] li, [data-testid=notice]')).toHaveCount(0);

  await signIn(page, 'gina@globex.test');
  await expect(page.locator(`[data-testid=recent-row][data-op="${bobsOp}"]`)).toHaveCount(0);
  await expect(page.locator('.field-error, [data-testid=form-errors] li')).toHaveCount(0);
});

test('a viewer sees its past exports with Export disabled, says why, and offers no download anywhere', async ({ page }) => {
  const VIC = 'vic@acme.test';
  // Vic exported while an analyst, then became a viewer again.
  exportd(['user', 'set-role', VIC, 'analyst']);
  try {
    await signIn(page, VIC);
    await exportUntilReady(page);
  } finally {
    exportd(['user', 'set-role', VIC, 'viewer']);
  }
  await page.reload();
  await expect(page.getByTestId('who')).toHaveText(VIC);
  await expect(status(page)).toHaveAttribute('data-state', 'ready');
  await expect(page.getByTestId('recent-row').first()).toBeVisible();
  await expect(page.getByTestId('export')).toBeDisabled();
  await expect(page.getByTestId('viewer-note')).toBeVisible();
  await expect(page.getByTestId('download')).toHaveCount(0);
  await expect(page.getByTestId('recent-download')).toHaveCount(0);
});

test('a Download answered 410 because the file expired turns the export into expired, with no Download left', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await exportUntilReady(page);
  const [op] = await exportsSince(t0);
  // Issue 21's defect 7: the size's unit and the digest's label are in the page's language.
  await expect(status(page)).toContainText(words().size);
  await expect(page.locator('.digest')).toContainText(words().digest);
  // The janitor ends the file's retention while the page still shows it ready (its transition
  // moves updated_at, as every transition does).
  await query('UPDATE jobs SET artifact_expired = true, updated_at = updated_at + 1 WHERE id = $1', [op.id]);
  await page.getByTestId('download').click();
  await expect(status(page)).toHaveAttribute('data-state', 'expired');
  await expect(page.getByTestId('download')).toHaveCount(0);
  // The page's notice and the server's problem, both in the page's language.
  await expect(page.getByTestId('notice')).toHaveText(words().refusedExpired);
  await expect(page.locator(`[data-testid=recent-row][data-op="${op.id}"]`)).toHaveAttribute('data-state', 'expired');
});

test('the recent list shows the days the user chose, in the timezone of the export, last day included', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  for (const timezone of ['UTC', 'Asia/Riyadh', 'America/New_York']) {
    await page.locator('select[name=range]').selectOption('custom');
    await page.locator('input[name=from]').fill('2026-01-01');
    await page.locator('input[name=to]').fill('2026-01-31');
    await page.locator('input[name=timezone]').fill(timezone);
    await exportUntilReady(page);
  }
  const made = await exportsSince(t0);
  expect(made).toHaveLength(3);
  for (const op of made) {
    await expect(page.locator(`[data-testid=recent-row][data-op="${op.id}"] td`).nth(1)).toHaveText('2026-01-01 – 2026-01-31');
  }
});

test('screen readers hear each state change once, never the numbers of every poll or countdown second', async ({ page, context }) => {
  // Every text any live region is given, from the page's first script.
  await context.addInitScript(() => {
    const heard: string[] = [];
    (window as unknown as { heard: string[] }).heard = heard;
    const live = (node: Node | null): Element | null => {
      for (let el = node instanceof Element ? node : node?.parentElement ?? null; el; el = el.parentElement) {
        if (el.hasAttribute('aria-live') || ['status', 'alert', 'log'].includes(el.getAttribute('role') ?? '')) return el;
      }
      return null;
    };
    new MutationObserver((records) => {
      const changed = new Set<Element>();
      for (const r of records) {
        const region = live(r.target);
        if (region) changed.add(region);
      }
      for (const region of changed) heard.push(region.textContent ?? '');
    }).observe(document, { subtree: true, childList: true, characterData: true });
  });
  await signIn(page, BOB);
  await wholeRange(page);
  const start = await page.evaluate(() => (window as unknown as { heard: string[] }).heard.length);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  // Several polls while it runs, each with more rows.
  await expect.poll(async () => Number(await page.getByTestId('progress').getAttribute('value')), { timeout: 30_000 }).toBeGreaterThan(0);
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const heard = (await page.evaluate(() => (window as unknown as { heard: string[] }).heard)).slice(start).filter((t) => t.trim() !== '');
  // submitting → queued → running → ready, perhaps without queued: each once, and no numbers.
  expect(heard.length).toBeLessThanOrEqual(4);
  expect(new Set(heard).size).toBe(heard.length);
  for (const text of heard) {
    expect(text).not.toMatch(/[0-9]/);
  }
});

test('an Export click right after a cancel starts a new operation, not the cancelled one again', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, BOB);
  await wholeRange(page);
  await page.getByTestId('export').click();
  await expect(status(page)).toHaveAttribute('data-state', 'running', { timeout: 30_000 });
  const cancelled = await status(page).getAttribute('data-op');
  // From here the page's status polls get no answer: only the cancel's own answer tells it, and
  // it says cancelled at once, as it does for an export still queued.
  await page.route('**/sfn/export_status', () => {});
  await page.route('**/sfn/cancel_export', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    body.status = 'cancelled';
    await route.fulfill({ response, json: body });
  });
  await page.getByTestId('cancel').click();
  await expect(status(page)).toHaveAttribute('data-state', 'cancelled');
  await page.getByTestId('export').click();
  await expect.poll(async () => (await exportsSince(t0)).length, { timeout: 15_000 }).toBe(2);
  await expect(status(page)).not.toHaveAttribute('data-op', cancelled!);
  await page.unroute('**/sfn/export_status');
  await page.unroute('**/sfn/cancel_export');
  await cancelIfRunning(page);
});

test('the language switch is marked with its own language, the role is translated, and the address and tenant keep their direction', async ({ page }) => {
  await signIn(page, BOB);
  const [first, other] = lang() === 'en' ? (['en', 'ar'] as const) : (['ar', 'en'] as const);
  const role = { en: 'analyst', ar: 'محلل' };
  await expect(page.locator('html')).toHaveAttribute('lang', first);
  await expect(page.getByTestId('language')).toHaveAttribute('lang', other);
  await expect(page.getByTestId('role')).toHaveText(role[first]);
  await expect(page.locator('.who bdi')).toHaveText([BOB, 'acme']);
  await page.getByTestId('language').click();
  await expect(page.locator('html')).toHaveAttribute('dir', other === 'ar' ? 'rtl' : 'ltr');
  await expect(page.getByTestId('language')).toHaveAttribute('lang', first);
  await expect(page.getByTestId('role')).toHaveText(role[other]);
  await expect(page.locator('.who bdi')).toHaveText([BOB, 'acme']);
  await page.getByTestId('language').click();
  await expect(page.locator('html')).toHaveAttribute('lang', first);
});

/// A problem answer, as the server sends one.
function problem(status: number, code: string) {
  return { status, contentType: 'application/problem+json', body: JSON.stringify({ type: 'about:blank', title: code, status, code }) };
}

test('a create that only ever fails stops after a bounded time with Try again and Discard, even after a reload; Try again resends the same key, and after Discard the next Export sends a new one', async ({ page }) => {
  const t0 = Date.now();
  // The page's timers and clock are Playwright's, so the half minute of tries passes at once.
  await page.clock.install();
  await signIn(page, BOB);
  const keys: string[] = [];
  await page.route('**/sfn/create_export', async (route) => {
    keys.push(route.request().postDataJSON().key);
    await route.fulfill(problem(503, 'busy'));
  });
  await page.getByTestId('export').click();
  const trouble = page.getByTestId('trouble');
  // Old code: the same key was sent again for ever, and the page stayed in Submitting.
  await expect(async () => {
    await page.clock.fastForward(5_000);
    await expect(trouble).toBeVisible({ timeout: 500 });
  }).toPass({ timeout: 60_000 });
  await expect(status(page)).toHaveAttribute('data-state', 'submitting');
  expect(keys.length).toBeGreaterThan(2);
  expect(new Set(keys).size).toBe(1);
  const [key] = keys;
  await shot(page, 'trouble');

  // A reload resumes the stored intent, tries it for a bounded time again, and stops again.
  await page.reload();
  await expect(page.getByTestId('who')).toHaveText(BOB);
  await expect(async () => {
    await page.clock.fastForward(5_000);
    await expect(trouble).toBeVisible({ timeout: 500 });
  }).toPass({ timeout: 60_000 });
  expect(new Set(keys)).toEqual(new Set([key]));

  const before = keys.length;
  await page.getByTestId('try-again').click();
  await expect.poll(() => keys.length).toBeGreaterThan(before);
  expect(new Set(keys)).toEqual(new Set([key]));
  await expect(async () => {
    await page.clock.fastForward(5_000);
    await expect(trouble).toBeVisible({ timeout: 500 });
  }).toPass({ timeout: 60_000 });

  await page.getByTestId('discard').click();
  await expect(trouble).toHaveCount(0);
  await expect(status(page)).toHaveAttribute('data-state', 'idle');
  expect(await page.evaluate((slot) => localStorage.getItem(slot), SLOT)).toBeNull();
  await page.unroute('**/sfn/create_export');
  const sent: string[] = [];
  page.on('request', (r) => {
    if (r.url().includes('/sfn/create_export')) sent.push(r.postDataJSON().key);
  });
  await exportUntilReady(page);
  expect(sent.length).toBeGreaterThan(0);
  expect(sent).not.toContain(key);
  expect((await exportsSince(t0)).length).toBe(1);
});

test('a poll answered with a 4xx that asking again will not change stops at once with Try again and Discard; Try again follows the same operation to the end', async ({ page }) => {
  const t0 = Date.now();
  await page.clock.install();
  await signIn(page, BOB);
  let refused = 0;
  await page.route('**/sfn/export_status', async (route) => {
    refused += 1;
    await route.fulfill(problem(400, 'malformed-json'));
  });
  await page.getByTestId('export').click();
  // Old code: polled again and again, for ever.
  await expect(page.getByTestId('trouble')).toBeVisible();
  const polls = refused;
  // A minute of the page's time passes: it asks nothing more (a request it sent would reach the
  // route before this page's own fetch below is answered).
  await page.clock.fastForward(60_000);
  await page.evaluate(() => fetch('/healthz'));
  expect(refused).toBe(polls);
  await page.unroute('**/sfn/export_status');
  const [op] = await exportsSince(t0);
  await expect(status(page)).toHaveAttribute('data-op', op.id);
  await page.getByTestId('try-again').click();
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
  await expect(status(page)).toHaveAttribute('data-op', op.id);
  await expect(page.getByTestId('trouble')).toHaveCount(0);
  expect((await exportsSince(t0)).length).toBe(1);
});

test('a poll the server does not answer in time is aborted, not left open beside the polls after it, and the export is still followed to the end', async ({ page }) => {
  const t0 = Date.now();
  await page.clock.install();
  await signIn(page, BOB);
  // The first poll is held, never answered (a server that hangs); later ones go through.
  let held = 0;
  await page.route('**/sfn/export_status', async (route) => {
    held += 1;
    if (held > 1) await route.continue();
  });
  const aborted: string[] = [];
  page.on('requestfailed', (request) => {
    if (request.url().includes('/sfn/export_status')) aborted.push(request.failure()?.errorText ?? '');
  });
  await page.getByTestId('export').click();
  await expect.poll(() => held).toBeGreaterThanOrEqual(1);
  // The call's 15 s pass: the page stops waiting for that poll and cancels its request (old
  // code: left open, one more on the browser's few connections to the server per lost poll).
  await page.clock.fastForward(15_000);
  await expect.poll(() => aborted.length).toBe(1);
  expect(aborted[0]).toContain('ABORTED');
  await page.unroute('**/sfn/export_status');
  const [op] = await exportsSince(t0);
  await expect(status(page)).toHaveAttribute('data-op', op.id);
  await expect(status(page)).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
  expect((await exportsSince(t0)).length).toBe(1);
});

test('two tabs clicking Export at once, one while the other is between reading and writing the stored intent, make one intent and one operation', async ({ context }) => {
  // A fault point in the page: while `__slowIntentWrites` is set, a write of the stored intent
  // first tells the other tabs it is about to write, then takes 300 ms. A tab with
  // `__clickOnWrite` set clicks Export on hearing it: inside the first tab's read-decide-write.
  await context.addInitScript(() => {
    const barrier = new BroadcastChannel('e2e-barrier');
    const setItem = Storage.prototype.setItem;
    Storage.prototype.setItem = function (key: string, value: string) {
      if ((window as any).__slowIntentWrites && key.startsWith('exportd.intent.')) {
        barrier.postMessage('writing');
        const until = performance.now() + 300;
        while (performance.now() < until) {}
      }
      return setItem.call(this, key, value);
    };
    barrier.onmessage = (e) => {
      if (e.data === 'writing' && (window as any).__clickOnWrite) {
        (window as any).__clickOnWrite = false;
        (document.querySelector('[data-testid=export]') as HTMLButtonElement).click();
      }
    };
  });
  const keys: string[] = [];
  await context.route('**/sfn/create_export', async (route) => {
    keys.push(route.request().postDataJSON().key);
    await route.continue();
  });
  for (let round = 0; round < 3; round++) {
    const t0 = Date.now();
    keys.length = 0;
    const first = await context.newPage();
    if (round === 0) {
      await signIn(first, BOB);
    } else {
      await first.goto('/');
    }
    await expect(first.getByTestId('export')).toBeEnabled();
    const second = await context.newPage();
    await second.goto('/');
    await expect(second.getByTestId('export')).toBeEnabled();
    await first.evaluate(() => ((window as any).__slowIntentWrites = true));
    await second.evaluate(() => ((window as any).__clickOnWrite = true));
    await first.getByTestId('export').click();
    await expect(status(first)).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
    await expect(status(second)).toHaveAttribute('data-state', 'ready', { timeout: 30_000 });
    expect(await second.evaluate(() => (window as any).__clickOnWrite)).toBe(false);
    // Old code: the second tab read no intent, made its own key and a second operation.
    expect(new Set(keys).size).toBe(1);
    const ops = await exportsSince(t0);
    expect(ops.length).toBe(1);
    await expect(status(first)).toHaveAttribute('data-op', ops[0].id);
    await expect(status(second)).toHaveAttribute('data-op', ops[0].id);
    await first.close();
    await second.close();
  }
});

test('a Download refused with 403 because the role changed says so and offers no Download any more', async ({ page }) => {
  await signIn(page, BOB);
  await exportUntilReady(page);
  exportd(['user', 'set-role', BOB, 'viewer']);
  try {
    await page.getByTestId('download').click();
    await expect(page.getByTestId('notice')).toBeVisible();
    // Old code: the notice, beside the same Download button that answers 403 again.
    await expect(page.getByTestId('download')).toHaveCount(0);
    await expect(page.getByTestId('recent-download')).toHaveCount(0);
    await expect(page.getByTestId('export')).toBeDisabled();
  } finally {
    exportd(['user', 'set-role', BOB, 'analyst']);
  }
});

test('a double click on More, or a refresh racing it, lists each export once', async ({ page }) => {
  await signIn(page, BOB);
  // More than two pages (of 20) of exports: made and cancelled through the API.
  const count = async () => Number((await query<{ n: string }>('SELECT COUNT(*) AS n FROM jobs e JOIN users u ON u.id = e.actor_id WHERE u.email = $1', [BOB]))[0].n);
  const origin = new URL(page.url()).origin;
  for (let made = await count(); made < 45; made++) {
    const created = await page.request.post('/api/exports', {
      headers: { Origin: origin, 'Idempotency-Key': crypto.randomUUID() },
      data: { report: 'customers', time_range: { preset: 'yesterday' } },
    });
    expect(created.status()).toBeLessThan(300);
    const { id } = await created.json();
    await page.request.post(`/api/exports/${id}/cancel`, { headers: { Origin: origin } });
    await expect.poll(async () => (await (await page.request.get(`/api/exports/${id}`)).json()).status).toMatch(TERMINAL);
  }
  await page.reload();
  const rows = page.getByTestId('recent-row');
  await expect(rows).toHaveCount(20);
  const firstPage = 20;
  const n = await count();
  await page.getByTestId('more').dblclick();
  await expect(rows).toHaveCount(Math.min(n, 2 * firstPage));
  const ids = await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-op')));
  expect(new Set(ids).size).toBe(ids.length);
  // A refresh (an export settling) while More loads: More's answer is held until the refresh has
  // been answered; the list is then the first page, the new export first, each export once.
  let releaseMore!: () => void;
  const moreHeld = new Promise<void>((resolve) => (releaseMore = resolve));
  let moreSeen = false;
  await page.route('**/sfn/list_exports', async (route) => {
    if (route.request().postDataJSON().cursor) {
      moreSeen = true;
      await moreHeld;
    }
    await route.continue();
  });
  await page.getByTestId('more').click();
  await expect.poll(() => moreSeen).toBe(true);
  const t0 = Date.now();
  const refreshed = page.waitForResponse((r) => r.url().includes('/sfn/list_exports') && !r.request().postDataJSON().cursor);
  await exportUntilReady(page);
  await refreshed;
  const [made] = await exportsSince(t0);
  await expect(rows.first()).toHaveAttribute('data-op', made.id);
  const moreAnswered = page.waitForResponse((r) => r.url().includes('/sfn/list_exports') && !!r.request().postDataJSON().cursor);
  releaseMore();
  await (await moreAnswered).finished();
  // The page has read the held answer by the time a request it sends after it is answered.
  await page.evaluate(() => fetch('/healthz').then((r) => r.text()));
  const after = await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-op')));
  expect(new Set(after).size).toBe(after.length);
  expect(after.length).toBe(firstPage);
  await page.unroute('**/sfn/list_exports');
});

test('a return visit downloads no wasm, glue or stylesheet: each is named by its hash and kept a year', async ({ page, context }) => {
  await signIn(page, BOB);
  const assets = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name).filter((n) => /\/pkg\//.test(n)));
  const wasm = assets.find((n) => n.endsWith('.wasm'));
  expect(wasm).toMatch(/\/pkg\/exportd\.[A-Za-z0-9_-]+\.wasm$/);
  expect(assets.some((n) => /\/pkg\/exportd\.[A-Za-z0-9_-]+\.css$/.test(n))).toBe(true);
  for (const url of assets) {
    expect((await page.request.head(url)).headers()['cache-control']).toBe('public, max-age=31536000, immutable');
  }
  const again = await context.newPage();
  await again.goto('/');
  await expect(again.getByTestId('export')).toBeEnabled();
  const transferred = await again.evaluate(() =>
    performance.getEntriesByType('resource').filter((e) => /\/pkg\//.test(e.name)).map((e) => [e.name, (e as PerformanceResourceTiming).transferSize]),
  );
  expect(transferred.length).toBeGreaterThanOrEqual(3);
  expect(transferred.filter(([, size]) => size !== 0)).toEqual([]);
});

test('the page comes with who is signed in, so a reload asks no /api/session, and no cache keeps it', async ({ page }) => {
  await signIn(page, BOB);
  const asked: string[] = [];
  page.on('request', (r) => {
    if (r.url().includes('/api/session')) asked.push(r.method());
  });
  await page.reload();
  await expect(page.getByTestId('who')).toHaveText(BOB);
  await expect(page.getByTestId('export')).toBeEnabled();
  expect(asked).toEqual([]);
  const html = await page.request.get('/');
  expect(html.headers()['cache-control']).toBe('no-store');
  expect(await html.text()).toContain(`"email":"${BOB}"`);
  // Signed out, the page says so the same way: the form at once, no call either.
  await page.getByTestId('sign-out').click();
  await expect(page.locator('input[name=email]')).toBeVisible();
  asked.length = 0;
  await page.reload();
  await expect(page.locator('input[name=email]')).toBeVisible();
  expect(asked).toEqual([]);
});
