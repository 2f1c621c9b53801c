import { test, expect } from '@playwright/test';
import { parse } from 'csv-parse/sync';
import { readFileSync } from 'node:fs';

// The page of a server whose catalog is not the demo's (start-catalog-server.sh,
// end2end/catalog.toml): it offers the catalog's report by its title in the page's language, a
// field for each of its filters, and exports through them with no change to the page.
test.use({ baseURL: `http://127.0.0.1:${Number(process.env.E2E_CATALOG_PORT ?? 3101)}` });

function lang(): 'en' | 'ar' {
  return test.info().project.name === 'ar' ? 'ar' : 'en';
}

test('a report the page has never heard of is offered by its title, filtered and exported', async ({ page }) => {
  await page.goto('/');
  await page.locator('input[name=email]').fill('alice@acme.test');
  await page.locator('input[name=password]').fill('export-demo');
  await page.getByTestId('sign-in').click();
  await expect(page.getByTestId('who')).toHaveText('alice@acme.test');

  const report = page.locator('select[name=report]');
  await expect(report.locator('option')).toHaveText([lang() === 'ar' ? 'زيارات العيادات' : 'Clinic visits']);
  await expect(report).toHaveValue('visits');
  // A field of its own type for each filter.
  await expect(page.locator('input[name=clinic]')).toHaveAttribute('type', 'text');
  await expect(page.locator('select[name=paid]')).toBeVisible();
  await expect(page.locator('input[name=min_fee]')).toHaveAttribute('type', 'number');
  await expect(page.locator('input[name=currency]')).toHaveCount(2);
  await expect(page.locator('input[name=status]')).toHaveCount(0);

  await page.locator('select[name=range]').selectOption('last_7_days');
  await page.locator('input[name=currency][value=SAR]').check();
  await page.locator('select[name=paid]').selectOption('true');
  await page.locator('input[name=min_fee]').fill('1');
  await page.getByTestId('export').click();
  await expect(page.getByTestId('status')).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  const rows: string[][] = parse(readFileSync((await download.path())!, 'utf8'));
  // Visit 1 only: SAR, paid, at least 1 SAR (visit 3 is 0.50); not globex's visit 4.
  expect(rows[0]).toEqual(['visit_id', 'clinic', 'visited_on', 'fee', 'currency', 'paid']);
  expect(rows.slice(1).map((r) => [r[0], r[1], r[3], r[5]])).toEqual([['1', 'عيادة النور', '125.00', 'true']]);
});
