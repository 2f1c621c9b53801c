import { test, expect } from '@playwright/test';
import { parse } from 'csv-parse/sync';
import { readFileSync } from 'node:fs';
import pg from 'pg';

function e2eDatabaseUrl(): string {
  const url = new URL(process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  url.pathname = '/exportd_e2e';
  return url.toString();
}

async function query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: e2eDatabaseUrl() });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end();
  }
}

test('bob exports orders, sees ready after a reload, and downloads a file whose rows match the database', async ({ page }) => {
  await page.goto('/');
  await page.getByLabel('Email').fill('bob@acme.test');
  await page.getByLabel('Password').fill('export-demo');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('who')).toHaveText('bob@acme.test');

  await page.getByLabel('Report').selectOption('orders');
  await page.getByLabel('Range').selectOption('last_7_days');
  const exportButton = page.getByTestId('export');
  // A double click is one intent.
  await exportButton.dblclick();

  // The intent (key + request) is in localStorage, and the operation id once known.
  await expect.poll(async () => page.evaluate(() => {
    const raw = localStorage.getItem('exportd.intent.bob@acme.test');
    return raw ? JSON.parse(raw).id ?? null : null;
  })).not.toBeNull();
  const intent = await page.evaluate(() => JSON.parse(localStorage.getItem('exportd.intent.bob@acme.test')!));
  expect(intent.key).toMatch(/^[0-9a-f-]{36}$/);

  // A reload resumes the same operation without a new POST.
  await page.reload();
  await expect(page.getByTestId('status')).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const exportsRows = await query<{ n: string }>('SELECT COUNT(*) AS n FROM exports');
  expect(Number(exportsRows[0].n)).toBe(1);

  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  const path = await download.path();
  const text = readFileSync(path!, 'utf8');
  const rows: string[][] = parse(text, { relax_column_count: false });
  const header = rows.shift()!;
  expect(header).not.toContain('customer_email');
  const idIndex = header.indexOf('order_id');
  expect(idIndex).toBeGreaterThanOrEqual(0);

  const [op] = await query<{ id: string; resolved: string }>('SELECT id, resolved FROM exports');
  expect(op.id).toBe(intent.id);
  const resolved = JSON.parse(op.resolved);
  const expected = await query<{ id: string }>(
    "SELECT o.id FROM orders o JOIN tenants t ON t.id = o.tenant_id WHERE t.slug = 'acme' AND o.placed_at >= $1 AND o.placed_at < $2 ORDER BY o.id",
    [Date.parse(resolved.from), Date.parse(resolved.to)],
  );
  expect(expected.length).toBeGreaterThan(0);
  expect(rows.map((r) => r[idIndex])).toEqual(expected.map((r) => String(r.id)));
});
