import { test, expect, Page } from '@playwright/test';
import { parse } from 'csv-parse/sync';
import { readFileSync } from 'node:fs';
import { query, lang, shot, signIn } from './support';

// The import section (SPEC §10 "Browser"). The server applies imports in batches of 100 rows and
// waits a moment before each (start-server.sh), so an apply of a few thousand rows runs long
// enough to reload during it. The tests wait on states the page shows, never on time.
test.describe.configure({ mode: 'serial' });

const ALICE = 'alice@acme.test';
const IMPORT_SLOT = 'exportd.import.acme.alice@acme.test';

async function importsSince(t0: number): Promise<{ id: string; status: string; request: string }[]> {
  return query(
    "SELECT j.id, j.status, j.request FROM jobs j JOIN users u ON u.id = j.actor_id WHERE u.email = $1 AND j.kind = 'import' AND j.created_at >= $2 ORDER BY j.created_at",
    [ALICE, t0],
  );
}

const importStatus = (page: Page) => page.getByTestId('import-status');

/// A customers file of `valid` good rows and three bad ones, at known lines: an address that is
/// not one (line 3), an unknown country (line 6), and a key given twice (lines 9 and 10).
function customersFile(tag: string, valid: number): { csv: string; bad: { line: number; code: string }[]; emails: string[] } {
  const lines = ['email,name,phone,country'];
  const emails: string[] = [];
  const bad: { line: number; code: string }[] = [];
  const good = () => {
    const email = `${tag}-${emails.length}@import.test`;
    emails.push(email);
    lines.push(`${email},Customer ${emails.length},+966500000${emails.length % 1000},SA`);
  };
  good();
  lines.push('not-an-address,Nobody,,SA');
  bad.push({ line: 3, code: 'invalid_email' });
  good();
  good();
  lines.push(`${tag}-x@import.test,Somewhere,,XX`);
  bad.push({ line: 6, code: 'invalid_country' });
  good();
  good();
  lines.push(`${tag}-twice@import.test,First,,SA`);
  lines.push(`${tag}-twice@import.test,Second,,SA`);
  bad.push({ line: 9, code: 'duplicate_key' }, { line: 10, code: 'duplicate_key' });
  while (emails.length < valid) good();
  return { csv: lines.join('\n') + '\n', bad, emails };
}

async function chooseFile(page: Page, name: string, csv: string) {
  await page.getByTestId('import-file').setInputFiles({ name, mimeType: 'text/csv', buffer: Buffer.from(csv) });
  await expect(page.getByTestId('upload-chosen')).toBeVisible({ timeout: 30_000 });
}

async function count(page: Page, name: string): Promise<number> {
  return Number(await page.locator(`[data-testid=import-count][data-count=${name}]`).getAttribute('data-value'));
}

test('an admin checks a file, reads its first errors and report, imports it, and a reload mid-apply resumes the one import', async ({ page }) => {
  const t0 = Date.now();
  const tag = `e2e-${lang()}-${t0}`;
  const file = customersFile(tag, 2500);
  await signIn(page, ALICE);
  await expect(page.getByTestId('imports')).toBeVisible({ timeout: 30_000 });
  await expect(importStatus(page)).toHaveAttribute('data-state', 'idle');
  await expect(page.getByTestId('check-file')).toBeDisabled();

  await page.getByTestId('import-dataset').selectOption('customers');
  await chooseFile(page, 'customers.csv', file.csv);
  await page.locator('input[name=on_error][value=skip_invalid]').check();
  await shot(page, 'import-chosen');

  // Check file: a dry run that lists the bad rows and writes nothing.
  await page.getByTestId('check-file').click();
  await expect(importStatus(page)).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  expect(await count(page, 'rows')).toBe(file.emails.length + file.bad.length);
  expect(await count(page, 'invalid')).toBe(file.bad.length);
  expect(await count(page, 'valid')).toBe(file.emails.length);
  expect(await count(page, 'created')).toBe(file.emails.length);
  expect(await count(page, 'applied')).toBe(0);
  const shown = await page.getByTestId('first-error').evaluateAll((rows) =>
    rows.map((r) => ({ line: Number(r.getAttribute('data-line')), code: r.getAttribute('data-code') })));
  expect(shown).toEqual(file.bad);
  await shot(page, 'import-checked');
  const written = await query<{ n: string }>("SELECT COUNT(*) AS n FROM customers WHERE email LIKE $1", [`${tag}-%`]);
  expect(Number(written[0].n)).toBe(0);

  // The report: one row per error, in input order, with the record's cells.
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('report-download').click()]);
  const report: string[][] = parse(readFileSync((await download.path())!, 'utf8'), { relax_column_count: true });
  expect(report[0].slice(0, 4)).toEqual(['line', 'column', 'code', 'message']);
  expect(report.slice(1).map((r) => ({ line: Number(r[0]), code: r[2] }))).toEqual(file.bad);
  expect(report[1].slice(4)).toEqual(['not-an-address', 'Nobody', '', 'SA']);

  // Import, then reload in the middle of the apply: the page resumes the same import without a
  // second create, and the file need not be chosen again.
  const creates: string[] = [];
  page.on('request', (r) => { if (r.url().includes('/sfn/create_import')) creates.push(r.postDataJSON().key); });
  await page.getByTestId('import-apply').click();
  await expect(importStatus(page)).toHaveAttribute('data-phase', 'applying', { timeout: 60_000 });
  const apply = (await importsSince(t0))[1];
  await expect(importStatus(page)).toHaveAttribute('data-op', apply.id);
  await shot(page, 'import-applying');
  expect(creates.length).toBe(1);
  const applied = await query<{ n: string }>("SELECT COUNT(*) AS n FROM customers WHERE email LIKE $1", [`${tag}-%`]);
  expect(Number(applied[0].n)).toBeLessThan(file.emails.length);

  await page.reload();
  await expect(importStatus(page)).toHaveAttribute('data-op', apply.id, { timeout: 30_000 });
  await expect(page.getByTestId('upload-chosen')).toBeVisible();
  await expect(importStatus(page)).toHaveAttribute('data-state', 'ready', { timeout: 90_000 });
  expect(await count(page, 'applied')).toBe(file.emails.length);
  expect(await count(page, 'created')).toBe(file.emails.length);
  await shot(page, 'import-done');
  expect(creates.length).toBe(1);
  const imports = await importsSince(t0);
  expect(imports.map((i) => i.status)).toEqual(['ready', 'ready']);
  const stored = await page.evaluate((slot) => JSON.parse(localStorage.getItem(slot)!), IMPORT_SLOT);
  expect(stored.id).toBe(apply.id);
  expect(stored.settled).toBe(true);
  const rows = await query<{ n: string }>("SELECT COUNT(*) AS n FROM customers WHERE email LIKE $1", [`${tag}-%`]);
  expect(Number(rows[0].n)).toBe(file.emails.length);
});

test('a file whose rows have errors checked under abort ends failed with nothing written, and says why', async ({ page }) => {
  const t0 = Date.now();
  const tag = `e2e-abort-${lang()}-${t0}`;
  const file = customersFile(tag, 20);
  await signIn(page, ALICE);
  await chooseFile(page, 'abort.csv', file.csv);
  await page.locator('input[name=on_error][value=abort]').check();
  await page.getByTestId('import-apply').click();
  await expect(importStatus(page)).toHaveAttribute('data-state', 'failed', { timeout: 60_000 });
  await expect(page.getByTestId('first-error')).toHaveCount(file.bad.length);
  expect(await count(page, 'applied')).toBe(0);
  await expect(page.getByTestId('report-download')).toBeVisible();
  const [job] = await importsSince(t0);
  const failed = await query<{ error_code: string }>('SELECT error_code FROM jobs WHERE id = $1', [job.id]);
  expect(failed[0].error_code).toBe('validation_failed');
  const rows = await query<{ n: string }>("SELECT COUNT(*) AS n FROM customers WHERE email LIKE $1", [`${tag}-%`]);
  expect(Number(rows[0].n)).toBe(0);
  await shot(page, 'import-failed');
});

test('an Excel export chosen on the page downloads as a workbook in the page\'s language and, chosen back in the file picker, checks with every row unchanged', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, ALICE);
  await page.locator('select[name=report]').selectOption('customers');
  await page.locator('select[name=range]').selectOption('custom');
  await page.locator('input[name=from]').fill('2020-01-01');
  await page.locator('input[name=to]').fill(new Date(Date.now() + 86_400_000).toISOString().slice(0, 10));
  await page.locator('select[name=format]').selectOption('xlsx');
  await expect(page.locator('input[name=bom]')).toBeDisabled();
  await expect(page.locator('input[name=compression]')).toBeDisabled();
  await page.getByTestId('export').click();
  await expect(page.getByTestId('status')).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const [op] = await query<{ id: string; request: string; artifact_rows: string }>(
    "SELECT j.id, j.request, j.artifact_rows FROM jobs j JOIN users u ON u.id = j.actor_id WHERE u.email = $1 AND j.kind = 'export' AND j.created_at >= $2", [ALICE, t0]);
  const request = JSON.parse(op.request);
  expect(request.format).toBe('xlsx');
  expect(request.options.language ?? 'en').toBe(lang());
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  expect(download.suggestedFilename()).toBe(`customers-${op.id}.xlsx`);
  const workbook = readFileSync((await download.path())!);
  expect(workbook.subarray(0, 4).toString('binary')).toBe('PK\x03\x04');

  await page.getByTestId('import-dataset').selectOption('customers');
  await page.getByTestId('import-file').setInputFiles({ name: 'customers.xlsx', mimeType: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet', buffer: workbook });
  await expect(page.getByTestId('upload-chosen')).toBeVisible({ timeout: 30_000 });
  await page.getByTestId('check-file').click();
  await expect(importStatus(page)).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const rows = Number(op.artifact_rows);
  expect(rows).toBeGreaterThan(0);
  expect(await count(page, 'rows')).toBe(rows);
  expect(await count(page, 'unchanged')).toBe(rows);
});

test('users who may not import see no import section', async ({ page }) => {
  await signIn(page, 'bob@acme.test');
  await expect(page.getByTestId('export')).toBeVisible();
  await expect(page.getByTestId('recent')).toBeVisible();
  await expect(page.getByTestId('imports')).toHaveCount(0);
});
