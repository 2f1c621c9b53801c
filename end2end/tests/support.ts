import { test, expect, Page } from '@playwright/test';
import { mkdirSync } from 'node:fs';
import pg from 'pg';

// What the page tests share: the e2e server's database, the page's language, screenshots and
// signing in with the demo password.

/// The database start-server.sh made for the e2e server.
export function e2eDatabaseUrl(): string {
  const url = new URL(process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres');
  url.pathname = '/exportd_e2e';
  return url.toString();
}

/// The rows of one query on that database.
export async function query<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: e2eDatabaseUrl() });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end();
  }
}

/// The language the page starts in: the project's (playwright.config.ts runs every test in
/// English and in Arabic, by the browser's Accept-Language).
export function lang(): 'en' | 'ar' {
  return test.info().project.name === 'ar' ? 'ar' : 'en';
}

/// Saves a screenshot named by the page's language at the start and `name`.
export function shot(page: Page, name: string) {
  mkdirSync(`${__dirname}/../screenshots`, { recursive: true });
  return page.screenshot({ path: `${__dirname}/../screenshots/${lang()}-${name}.png`, fullPage: true });
}

/// Signs `email` in with the demo password and waits until the page says who it is.
export async function signIn(page: Page, email: string) {
  await page.goto('/');
  await page.locator('input[name=email]').fill(email);
  await page.locator('input[name=password]').fill('export-demo');
  await page.getByTestId('sign-in').click();
  await expect(page.getByTestId('who')).toHaveText(email);
}
