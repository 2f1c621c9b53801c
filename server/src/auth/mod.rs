//! Who is calling, and what they may do: passwords, browser sessions, exportd's API tokens,
//! the organisation's OpenID Connect provider (sign-in and access tokens), all yielding the same
//! [`Actor`]; roles, and the one [`Authority`] a role is read from; the same-origin rule.

mod actor;
pub mod authority;
pub mod oidc;
pub mod oidc_sign_in;
mod origin;
mod passwords;
mod sessions;
pub mod throttle;
mod tokens;

pub use actor::{actor_of_subject, cookie_value, load_active_actor, session_secret, Actor, AuthVia};
pub use authority::Authority;
pub use crate::config::PublicOrigin;
pub use origin::{client_ip, origin, over_tls, require_same_origin, throttle_address};
pub use passwords::{hash_password, verify_password_or_dummy, NO_PASSWORD};
pub use sessions::{clear_session_cookie, create_session, purge_sessions, revoke_session, session_cookie, session_cookie_name, SESSION_COOKIE};
pub use tokens::{create_token, hash_secret, new_secret};

/// A user's role (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Exports, reads PII columns, manages members.
    Admin,
    /// Exports, no PII columns.
    Analyst,
    /// Sees its own past exports; cannot export or download.
    Viewer,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Admin, Role::Analyst, Role::Viewer];

    /// Parses a stored or typed role name.
    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "admin" => Some(Role::Admin),
            "analyst" => Some(Role::Analyst),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    /// The lesser of two roles (a viewer is less than an analyst, an analyst than an admin).
    pub fn lesser(self, other: Role) -> Role {
        let rank = |r: Role| match r {
            Role::Viewer => 0,
            Role::Analyst => 1,
            Role::Admin => 2,
        };
        if rank(other) < rank(self) {
            other
        } else {
            self
        }
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Analyst => "analyst",
            Role::Viewer => "viewer",
        }
    }

    /// Whether the role may export at all.
    pub fn may_export(self) -> bool {
        matches!(self, Role::Admin | Role::Analyst)
    }

    /// Whether the role may read PII columns.
    pub fn may_read_pii(self) -> bool {
        matches!(self, Role::Admin)
    }

    /// Whether the role may export a contract, given whether it includes PII columns: the role
    /// part of SPEC §2's "authorised", for every check of it (create, worker, links).
    pub fn may_export_contract(self, needs_pii: bool) -> bool {
        self.may_export() && (!needs_pii || self.may_read_pii())
    }

    /// Whether the role may upload files and import them (SPEC §10): only an admin.
    pub fn may_import(self) -> bool {
        matches!(self, Role::Admin)
    }
}
