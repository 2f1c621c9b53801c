//! "Authorised" (SPEC §2) as a condition the database checks inside a worker's fenced writes, so
//! a revocation that lands between a check and a write still stops the write. The rules
//! themselves are [`Role::may_export_contract`] and [`Role::may_import`]; this only lists the
//! roles they allow.

use crate::auth::Role;
use crate::entities::{jobs, users};
use sea_orm::sea_query::{Expr, ExprTrait, Query};

/// What the job's actor must still be allowed to do for a fenced write to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authority {
    /// Export a contract whose resolved columns do or do not include PII columns.
    Export {
        /// Whether they do.
        needs_pii: bool,
        /// The roles the report names.
        roles: crate::catalog::Roles,
    },
    /// Import (SPEC §10).
    Import,
}

impl Authority {
    /// The names of the roles that may do it.
    pub fn roles(self) -> Vec<&'static str> {
        let allowed = |r: &Role| match self {
            Authority::Export { needs_pii, roles } => roles.allows(*r) && r.may_export_contract(needs_pii),
            Authority::Import => r.may_import(),
        };
        Role::ALL.into_iter().filter(allowed).map(Role::as_str).collect()
    }

    /// `EXISTS (…)`: the job's actor exists, is active, belongs to the job's tenant and has a
    /// role that may do it.
    pub fn condition(self) -> Expr {
        Expr::exists(
            Query::select()
                .expr(Expr::val(1))
                .from(users::Entity)
                .and_where(Expr::col((users::Entity, users::Column::Id)).equals((jobs::Entity, jobs::Column::ActorId)))
                .and_where(Expr::col((users::Entity, users::Column::TenantId)).equals((jobs::Entity, jobs::Column::TenantId)))
                .and_where(Expr::col((users::Entity, users::Column::Active)).eq(true))
                .and_where(Expr::col((users::Entity, users::Column::Role)).is_in(self.roles()))
                .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_admins_may_export_pii_or_import_and_viewers_may_export_nothing() {
        let both = crate::catalog::Roles { admin: true, analyst: true };
        assert_eq!(Authority::Export { needs_pii: true, roles: both }.roles(), vec!["admin"]);
        assert_eq!(Authority::Export { needs_pii: false, roles: both }.roles(), vec!["admin", "analyst"]);
        let admins = crate::catalog::Roles { admin: true, analyst: false };
        assert_eq!(Authority::Export { needs_pii: false, roles: admins }.roles(), vec!["admin"], "a report's roles narrow the rule");
        assert_eq!(Authority::Import.roles(), vec!["admin"]);
    }
}
