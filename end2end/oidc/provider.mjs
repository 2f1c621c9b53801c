// A real OpenID Connect provider for the browser tests: panva's `oidc-provider` from npm, with
// its development login (any name, any password) and consent pages. A name starting with
// `admin` signs in as an admin of the demo tenant `acme`, any other as an analyst; the tenant and
// role travel in the ID token as `exportd_tenant` and `exportd_role`, as an organisation's
// provider would be set up to send them (docs/authentication.md).
import Provider from 'oidc-provider';

const port = Number(process.env.E2E_OIDC_PORT ?? 3102);
const exportd = `http://127.0.0.1:${Number(process.env.E2E_PORT ?? 3100)}`;

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [
    {
      client_id: 'exportd-e2e',
      client_secret: 'e2e-secret-that-is-long-enough',
      redirect_uris: [`${exportd}/auth/oidc/callback`],
      post_logout_redirect_uris: [`${exportd}/`],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  claims: {
    openid: ['sub', 'exportd_tenant', 'exportd_role'],
    email: ['email', 'email_verified'],
    profile: ['name'],
  },
  // The scopes' claims go into the ID token itself, where exportd reads them.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  cookies: { keys: ['e2e-cookie-key-not-a-secret'] },
  ttl: { Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, IdToken: 600 },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          email: `${id}@idp.test`,
          email_verified: true,
          name: id,
          exportd_tenant: 'acme',
          exportd_role: id.startsWith('admin') ? 'admin' : 'analyst',
        };
      },
    };
  },
});
provider.proxy = false;
provider.listen(port, '127.0.0.1', () => console.log(`oidc-provider on http://127.0.0.1:${port}`));
