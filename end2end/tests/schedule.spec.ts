import { test, expect } from '@playwright/test';
import { mkdirSync } from 'node:fs';
import { query, lang, signIn } from './support';

// The schedules section (contract §15): an admin makes a schedule, pauses, resumes and deletes it,
// and reads its runs; other roles do not see the section. The tests wait on what the page shows.
test.describe.configure({ mode: 'serial' });

const ALICE = 'alice@acme.test';

test('an admin makes one schedule with a double click, pauses, resumes and deletes it, and reads its runs', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, ALICE);
  const section = page.getByTestId('schedules');
  await expect(section).toBeVisible();
  await expect(section.locator('h2')).toHaveText(lang() === 'ar' ? 'الجداول الزمنية' : 'Schedules');
  await page.getByTestId('schedule-timezone').fill('Asia/Riyadh');
  await page.getByTestId('schedule-every').selectOption('week');
  await page.getByTestId('schedule-weekday').fill('7');
  await page.getByTestId('schedule-at').fill('06:30');
  await page.getByTestId('schedule-window').selectOption('previous_week');
  await page.getByTestId('schedule-create').dblclick();
  await expect(section.locator('[data-testid=schedule-row]').first()).toBeVisible();
  await expect(page.getByTestId('schedule-create')).toBeEnabled();
  const made = await query<{ id: string; request: string }>(
    'SELECT s.id, r.request FROM schedules s JOIN users u ON u.id = s.owner_id JOIN schedule_revisions r ON r.schedule_id = s.id WHERE u.email = $1 AND s.created_at >= $2',
    [ALICE, t0],
  );
  expect(made.length, 'a double click makes one schedule').toBe(1);
  const request = JSON.parse(made[0].request);
  expect(request.timezone).toBe('Asia/Riyadh');
  expect(request.cadence).toEqual({ every: 'week', at: '06:30', weekday: 7 });
  expect(request.window).toBe('previous_week');
  const row = section.locator(`[data-testid=schedule-row][data-id="${made[0].id}"]`);
  await expect(row).toHaveAttribute('data-status', 'active');
  mkdirSync(`${__dirname}/../screenshots`, { recursive: true });
  await section.screenshot({ path: `${__dirname}/../screenshots/${lang()}-schedules.png` });

  await row.getByTestId('schedule-pause').click();
  await expect(row).toHaveAttribute('data-status', 'paused');
  await row.getByTestId('schedule-pause').click();
  await expect(row).toHaveAttribute('data-status', 'active');
  await row.getByTestId('schedule-runs').click();
  await expect(section.getByTestId('schedule-runs-of')).toHaveAttribute('data-id', made[0].id);
  await expect(section.getByTestId('schedule-no-runs')).toBeVisible();
  await row.getByTestId('schedule-delete').click();
  await expect(row).toHaveCount(0);
  const left = await query<{ deleted_at: string | null }>('SELECT deleted_at FROM schedules WHERE id = $1', [made[0].id]);
  expect(left[0].deleted_at).not.toBeNull();
});

test('a create whose answer is lost is sent again with the same key, by the next click or after a reload, and each intent makes one schedule', async ({ page }) => {
  const t0 = Date.now();
  await signIn(page, ALICE);
  const made = async () =>
    query<{ id: string; request: string }>(
      'SELECT s.id, r.request FROM schedules s JOIN users u ON u.id = s.owner_id JOIN schedule_revisions r ON r.schedule_id = s.id WHERE u.email = $1 AND s.created_at >= $2 ORDER BY s.created_at',
      [ALICE, t0],
    );
  let calls = 0;
  await page.route('**/sfn/create_schedule', async (route) => {
    calls += 1;
    if (calls === 1) {
      await route.fetch(); // the server makes the schedule ...
      await route.abort('failed'); // ... and the page never hears of it
    } else if (calls === 3) {
      await route.abort('failed'); // this one never reaches the server
    } else {
      await route.continue();
    }
  });
  // The first intent: its answer is lost, and the next click sends it again.
  await page.getByTestId('schedule-timezone').fill('Europe/London');
  await page.getByTestId('schedule-create').click();
  await expect(page.getByTestId('schedule-problem')).toBeVisible();
  await page.getByTestId('schedule-create').click();
  await expect(page.getByTestId('schedule-problem')).toHaveCount(0);
  await expect(page.getByTestId('schedule-create')).toBeEnabled();
  await expect.poll(async () => (await made()).length).toBe(1);
  // The second: it never reached the server; after a reload the section sends it.
  await page.getByTestId('schedule-timezone').fill('Asia/Dubai');
  await page.getByTestId('schedule-create').click();
  await expect(page.getByTestId('schedule-problem')).toBeVisible();
  await page.reload();
  await expect(page.getByTestId('who')).toHaveText(ALICE);
  await expect.poll(async () => (await made()).length).toBe(2);
  const rows = await made();
  expect(rows.map((r) => JSON.parse(r.request).timezone)).toEqual(['Europe/London', 'Asia/Dubai']);
  expect(calls, 'one send more for each, and no other').toBe(4);
  for (const r of rows) {
    const row = page.locator(`[data-testid=schedule-row][data-id="${r.id}"]`);
    await row.getByTestId('schedule-delete').click();
    await expect(row).toHaveCount(0);
  }
});

test('a schedule the server refuses says why, in the page\'s language', async ({ page }) => {
  await signIn(page, ALICE);
  await page.getByTestId('schedule-timezone').fill('Mars/Olympus');
  await page.getByTestId('schedule-create').click();
  await expect(page.getByTestId('schedule-problem')).toBeVisible();
});

test('users who are not admins see no schedules section', async ({ page }) => {
  await signIn(page, 'bob@acme.test');
  await expect(page.getByTestId('export-form')).toBeVisible();
  await expect(page.getByTestId('schedules')).toHaveCount(0);
});
