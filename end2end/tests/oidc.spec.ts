import { test, expect, Page } from '@playwright/test';
import { parse } from 'csv-parse/sync';
import { mkdirSync, readFileSync } from 'node:fs';

// Sign-in through a real OpenID Connect provider (oidc/provider.mjs, `oidc-provider` from npm,
// started by playwright.config.ts), then an export and its download, in English and in Arabic.
test.describe.configure({ mode: 'serial' });

const lang = () => (test.info().project.name === 'ar' ? 'ar' : 'en');
const BUTTON = { en: 'Sign in with Example IdP', ar: 'تسجيل الدخول عبر Example IdP' };

/// Through the provider's development login and consent, as `login`.
async function signInWithProvider(page: Page, login: string) {
  await page.goto('/');
  const button = page.getByTestId('sign-in-with-provider');
  await expect(button).toHaveText(BUTTON[lang()]);
  mkdirSync(`${__dirname}/../screenshots`, { recursive: true });
  await page.screenshot({ path: `${__dirname}/../screenshots/${lang()}-sign-in-with-provider.png`, fullPage: true });
  await button.click();
  await expect(page).toHaveURL(/127\.0\.0\.1:3102\/interaction\//);
  await page.locator('input[name=login]').fill(login);
  await page.locator('input[name=password]').fill('anything');
  await page.locator('button[type=submit]').click();
  // The login page goes; then comes the consent page (the first time this account meets the
  // client) or, without one, exportd's page.
  await expect(page.locator('input[name=login]')).toHaveCount(0);
  await page.waitForURL(/127\.0\.0\.1:3102\/interaction\/|127\.0\.0\.1:3100\/$/);
  if (/\/interaction\//.test(page.url())) {
    await page.locator('button[type=submit]').click();
  }
  await expect(page).toHaveURL(/127\.0\.0\.1:3100\/$/);
  await expect(page.getByTestId('who')).toHaveText(`${login}@idp.test`);
}

test('sign-in through the organisation\'s provider, then an export and its download', async ({ page }) => {
  const login = `analyst-${lang()}-${Date.now()}`;
  await signInWithProvider(page, login);
  await page.getByTestId('export').click();
  await expect(page.getByTestId('status')).toHaveAttribute('data-state', 'ready', { timeout: 60_000 });
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download').click()]);
  const rows: string[][] = parse(readFileSync((await download.path())!, 'utf8'));
  expect(rows[0][0]).toBe('order_id');
  expect(rows.length).toBeGreaterThan(1);
  // An analyst's file has no PII columns.
  expect(rows[0]).not.toContain('customer_email');
  await page.getByTestId('sign-out').click();
  await expect(page.getByTestId('sign-in-with-provider')).toBeVisible();
  expect((await page.request.get('/api/session')).status()).toBe(401);
  // The provider's own sign-out, offered beside: its end-session page, then back to exportd.
  await page.getByTestId('provider-sign-out').click();
  await expect(page).toHaveURL(/127\.0\.0\.1:3102\/session\/end/);
  await page.locator('button[type=submit], button[autofocus]').first().click();
  await expect(page).toHaveURL(/127\.0\.0\.1:3100\/$/);
  // Signed out there too: the next sign-in asks for a login again.
  await page.getByTestId('sign-in-with-provider').click();
  await expect(page.locator('input[name=login]')).toBeVisible();
});

test('a callback whose state this browser never started is a page that says why, and signs no one in', async ({ page }) => {
  const answer = await page.goto('/auth/oidc/callback?code=forged&state=forged');
  expect(answer!.status()).toBe(400);
  await expect(page.getByTestId('sign-in-failed')).toContainText('Sign-in failed');
  await expect(page.getByTestId('sign-in-failed')).toContainText('تعذّر تسجيل الدخول');
  const session = await page.request.get('/api/session');
  expect(session.status()).toBe(401);
});
